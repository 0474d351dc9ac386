// Package clustertest helps write a goray backend on the cluster runtime
// (package backend/cluster), inside this repository or outside it: an
// in-memory node source and an in-process runner to start from, and
// conformance tests for the two seams.
//
//   - [StaticSource] reports a fixed list of nodes and changes them only
//     through fault injection (Kill, Restore, Drain): a TPU VM list read
//     from a file, or a test's cluster. backend/local is built on it.
//   - [Runner] runs work on the goroutines of this process.
//   - [TestSource] and [TestRunner] check a NodeSource's and a Runner's
//     contracts (cluster's seams.go) on the implementation under test. A
//     whole backend then runs backend/backendtest's conformance suite.
//
// docs/backends.md is the guide; it builds a backend from a static list of
// TPU VMs that passes both suites from a module of its own.
//
// # Concurrency
//
// A StaticSource and a Runner are safe for concurrent use, as the runtime
// requires.
package clustertest
