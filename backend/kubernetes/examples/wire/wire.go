//go:build wireinject

package main

import (
	"context"

	"github.com/google/wire"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/ray/raywire"
)

// initCluster builds a cluster on a Kubernetes cluster. Wire generates its
// body into wire_gen.go; from backend/kubernetes:
//
//	go run github.com/google/wire/cmd/wire@v0.7.0 ./examples/wire
func initCluster(ctx context.Context, cfg kubernetes.Config, opts *ray.Options) (*ray.Cluster, func(), error) {
	wire.Build(kubernetes.BackendSet, raywire.Set)
	return nil, nil, nil
}
