// Command root is check-publish.sh's program on the root module alone: a
// task on the local simulator and a v6e 4x4 slice reservation.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var square = ray.NewTask("publish.square", func(ctx context.Context, x int) (int, error) { return x * x, nil })

func main() {
	ray.Main()
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4"}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	v, err := square.Remote(ctx, c, 7).Get(ctx)
	if err != nil {
		log.Fatal(err)
	}
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4"})
	if err != nil {
		log.Fatal(err)
	}
	defer spg.Release(ctx)
	fmt.Println("root ok:", v, len(spg.Hosts()), "hosts")
}
