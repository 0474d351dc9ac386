//go:build wireinject

package main

import (
	"context"

	"github.com/google/wire"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/ray/raywire"
)

// initCluster builds a cluster on the local simulator. Wire generates its
// body into wire_gen.go: go run github.com/google/wire/cmd/wire@v0.7.0 ./examples/hello-wire
func initCluster(ctx context.Context, spec local.ClusterSpec, opts *local.Options, ropts *ray.Options) (*ray.Cluster, func(), error) {
	wire.Build(local.Set, raywire.Set)
	return nil, nil, nil
}
