package clustertest

import "github.com/goray-dev/goray/backend/cluster"

// Runner is [cluster.GoroutineRunner].
//
// Deprecated: use cluster.GoroutineRunner. It moved to package cluster so
// that a backend using it does not link package testing into production
// binaries through this package.
type Runner = cluster.GoroutineRunner
