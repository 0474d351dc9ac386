package clustertest

import "github.com/goray-dev/goray/backend/cluster"

// StaticSource is [cluster.StaticSource].
//
// Deprecated: use cluster.StaticSource. It moved to package cluster so
// that backends built on it (backend/local) do not link package testing
// into production binaries through this package.
type StaticSource = cluster.StaticSource

// NewStaticSource calls [cluster.NewStaticSource].
//
// Deprecated: use cluster.NewStaticSource (see [StaticSource]).
func NewStaticSource(nodes []cluster.Node) *StaticSource { return cluster.NewStaticSource(nodes) }
