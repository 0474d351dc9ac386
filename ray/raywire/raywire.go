// Package raywire is package ray's Wire provider set (github.com/google/wire):
// a *ray.Cluster from a backend, closed by Wire's cleanup. Combine it with
// a backend's set:
//
//	wire.Build(local.Set, raywire.Set)            // the simulator
//	wire.Build(kubernetes.BackendSet, raywire.Set) // GKE
//
// It is a package of its own so that package ray, the portable API, does
// not depend on a dependency-injection tool: a program that builds its
// cluster by hand (ray.NewCluster) never imports Wire's runtime package.
// examples/hello-wire is a small injector.
package raywire

import (
	"context"

	"github.com/google/wire"

	"github.com/goray-dev/goray/ray"
)

// ProvideCluster is ray.NewCluster shaped for dependency injection: it
// returns a cleanup function that closes the cluster. It is the provider
// of [Set].
func ProvideCluster(ctx context.Context, b ray.Backend, opts *ray.Options) (*ray.Cluster, func(), error) {
	c, err := ray.NewCluster(ctx, b, opts)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { c.Close() }, nil
}

// Set is the Wire provider set of package ray: a *ray.Cluster from a
// backend.Backend and *ray.Options, closed by Wire's cleanup.
var Set = wire.NewSet(ProvideCluster)
