// Command hello-wire builds a cluster on the local simulator with a Wire
// injector instead of by hand: local.Set provides the backend from a
// local.ClusterSpec, and raywire.Set provides the *ray.Cluster and its cleanup.
// wire.go declares the injector; wire_gen.go is what Wire generated from it:
//
//	go run github.com/google/wire/cmd/wire@v0.7.0 ./examples/hello-wire
//
// Wire is optional: examples/hello builds the same kind of cluster by hand,
// and every constructor in goray works without it.
//
//	go run ./examples/hello-wire
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// Square is registered by name at package initialization.
var Square = ray.NewTask("hellowire.square", func(ctx context.Context, x int) (int, error) {
	return x * x, nil
})

// clusterSpec is two 4-CPU nodes.
func clusterSpec() local.ClusterSpec {
	return local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2, Resources: ray.Resources{ray.CPU: 4}}}}
}

func main() {
	ray.Main() // serve as a worker when a backend launched this binary as one
	ctx := context.Background()
	c, cleanup, err := initCluster(ctx, clusterSpec(), nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup() // closes the cluster and its backend
	if err := run(ctx, c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c *ray.Cluster, w io.Writer) error {
	v, err := Square.Remote(ctx, c, 7).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "square of 7:", v)
	return nil
}
