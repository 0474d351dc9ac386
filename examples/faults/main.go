// Command faults injects failures into the local simulator: a node dies and
// comes back, and GKE preempts a whole TPU slice while it is reserved.
//
// Fault injection is an optional backend capability. From a cluster, reach
// it through [ray.Cluster.Backend]: ray.FaultInjector has KillNode and
// RestartNode, which every backend that can simulate failures implements;
// PreemptSlice is specific to the simulator, on *local.Backend.
//
//	go run ./examples/faults
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
var Square = ray.NewTask("faults.square", func(ctx context.Context, x int) (int, error) {
	return x * x, nil
})

// clusterSpec is two CPU nodes in different zones and one v6e 4x4 slice
// (four hosts of four chips).
func clusterSpec() local.ClusterSpec {
	return local.ClusterSpec{
		Nodes: []local.NodeSpec{
			{Name: "cpu-a", Resources: ray.Resources{ray.CPU: 4}, Labels: map[string]string{"zone": "a"}},
			{Name: "cpu-b", Resources: ray.Resources{ray.CPU: 4}, Labels: map[string]string{"zone": "b"}},
		},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4"}},
	}
}

func main() {
	ray.Main() // serve as a worker when a backend launched this binary as one
	ctx := context.Background()
	b, err := local.New(clusterSpec(), nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := run(ctx, c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c *ray.Cluster, w io.Writer) error {
	// KillNode and RestartNode: any backend that can simulate failures.
	fi, ok := ray.As[ray.FaultInjector](c)
	if !ok {
		return fmt.Errorf("backend %T cannot inject faults", c.Backend())
	}
	if err := fi.KillNode(ctx, "cpu-a"); err != nil {
		return err
	}
	// With cpu-a dead no live node is in zone a: a task that must run there
	// fails at once. Work running on a node when it dies fails with
	// Unavailable and is retried; its actors restart elsewhere, per
	// MaxRestarts.
	inZoneA := ray.NodeSelector{"zone": "a"}
	_, err := Square.Remote(ctx, c, 4, inZoneA).Get(ctx)
	if ray.CodeOf(err) != ray.Infeasible {
		return fmt.Errorf("zone a with cpu-a dead: want an Infeasible error, got %v", err)
	}
	fmt.Fprintf(w, "expected error, cpu-a is dead: %v\n  %v\n", ray.CodeOf(err), err)
	if err := fi.RestartNode(ctx, "cpu-a"); err != nil {
		return err
	}
	v, err := Square.Remote(ctx, c, 4, inZoneA).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "cpu-a restarted: square of 4 in zone a is", v)

	// PreemptSlice: the simulator kills every host of a slice at once.
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "train"})
	if err != nil {
		return err
	}
	defer spg.Release(ctx)
	lb, ok := ray.As[*local.Backend](c)
	if !ok {
		return fmt.Errorf("PreemptSlice needs the local simulator, not %T", c.Backend())
	}
	if err := lb.PreemptSlice(ctx, spg.SliceNames()[0]); err != nil {
		return err
	}
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\npreempted while reserved:\n%s", ray.FormatSlices(states))
	if err := spg.Release(ctx); err != nil {
		return err
	}
	for _, h := range spg.Hosts() {
		if err := fi.RestartNode(ctx, h); err != nil {
			return err
		}
	}
	states, err = ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nreleased, hosts restarted:\n%s", ray.FormatSlices(states))
	return nil
}
