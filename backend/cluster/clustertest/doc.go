// Package clustertest helps test a goray backend built on the cluster
// runtime (package backend/cluster), inside this repository or outside
// it: conformance tests for the runtime's two seams. It imports package
// testing, so production code must not import it (internal/layout's
// TestProductionDoesNotLinkTesting checks this repository's).
//
//   - [TestSource] and [TestRunner] check a NodeSource's and a Runner's
//     contracts (cluster's seams.go) on the implementation under test. A
//     whole backend then runs backend/backendtest's conformance suite.
//
// The in-memory node source and the in-process runner to start a backend
// from are in package cluster ([cluster.StaticSource],
// [cluster.GoroutineRunner]); the names StaticSource, NewStaticSource
// and Runner here are deprecated aliases of them.
//
// docs/backends.md is the guide; it builds a backend from a static list of
// TPU VMs that passes both suites from a module of its own.
package clustertest
