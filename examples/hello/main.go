// Command hello tours goray on the local cluster simulator: tasks, a task
// chain through object refs, an actor, a placement group, and the error a
// request no node can hold gets. It builds its cluster by hand, as the
// README shows; examples/hello-wire builds the same cluster with a Wire
// injector.
//
//	go run ./examples/hello
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"slices"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// Tasks and actors are registered by name at package initialization, so
// that every process of the program knows them.
var (
	Square = ray.NewTask("hello.square", func(ctx context.Context, x int) (int, error) {
		return x * x, nil
	})
	Sum = ray.NewTask("hello.sum", func(ctx context.Context, xs []int) (int, error) {
		total := 0
		for _, x := range xs {
			total += x
		}
		return total, nil
	})
	Where = ray.NewTask("hello.where", func(ctx context.Context, _ struct{}) (string, error) {
		rc, _ := ray.Runtime(ctx)
		return fmt.Sprintf("bundle %d on %s (zone %s)", rc.BundleIndex(), rc.NodeName(), rc.NodeLabels()["zone"]), nil
	})

	Counter = ray.NewActorClass("hello.counter", func(ctx context.Context, start int) (*counter, error) {
		return &counter{n: start}, nil
	})
	Add = ray.NewMethod(Counter, "add", func(ctx context.Context, c *counter, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
)

type counter struct{ n int }

// clusterSpec is a small simulated cluster: three 4-CPU nodes in three
// zones.
func clusterSpec() local.ClusterSpec {
	var spec local.ClusterSpec
	for i, zone := range []string{"a", "b", "c"} {
		spec.Nodes = append(spec.Nodes, local.NodeSpec{
			Name:      fmt.Sprintf("node-%d", i),
			Resources: ray.Resources{ray.CPU: 4, ray.Memory: 16 << 30},
			Labels:    map[string]string{"zone": zone},
		})
	}
	return spec
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
	// A task call returns a typed ref at once; Get waits for the value.
	ref := Square.Remote(ctx, c, 3) // ray.ObjectRef[int]
	v, err := ref.Get(ctx)
	if err != nil {
		return err
	}
	// A ref is also an input: the next task runs when ref is ready,
	// without a round trip through the caller.
	next, err := Square.RemoteRef(ctx, c, ref).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "square of 3:", v, "- square of that:", next)

	// Submit five, then gather; Put stores a value for tasks to read.
	var refs []ray.ObjectRef[int]
	for i := 1; i <= 5; i++ {
		refs = append(refs, Square.Remote(ctx, c, i))
	}
	squares, err := ray.GetAll(ctx, refs)
	if err != nil {
		return err
	}
	total, err := Sum.RemoteRef(ctx, c, ray.Put(ctx, c, squares)).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "squares:", squares, "- sum:", total)

	// An actor keeps state between calls; with MaxConcurrency(1) they run
	// one at a time, in order.
	h := Counter.Remote(ctx, c, 100, ray.MaxRestarts(2), ray.MaxConcurrency(1))
	var adds []ray.ObjectRef[int]
	for i := 1; i <= 3; i++ {
		adds = append(adds, Add.Remote(ctx, h, i))
	}
	counts, err := ray.GetAll(ctx, adds)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "counter:", counts)
	if err := h.Kill(ctx); err != nil {
		return err
	}

	// A placement group reserves bundles on distinct nodes, all or none.
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{
		Name:     "spread",
		Strategy: ray.StrictSpread,
		Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 2}},
			{Resources: ray.Resources{ray.CPU: 2}},
			{Resources: ray.Resources{ray.CPU: 2}},
		},
	})
	if err != nil {
		return err
	}
	defer pg.Remove(ctx) // queued work in it then fails, running work is cancelled
	if err := pg.Ready(ctx); err != nil {
		return err
	}
	var places []string
	for i := range pg.NumBundles() {
		p, err := Where.Remote(ctx, c, struct{}{}, ray.InBundle(pg, i), ray.Resources{ray.CPU: 2}).Get(ctx)
		if err != nil {
			return err
		}
		places = append(places, p)
	}
	slices.Sort(places)
	for _, p := range places {
		fmt.Fprintln(w, "placement group:", p)
	}

	// Asking for more than any node has fails at once, saying why. This
	// error is the point of the demo, so it is printed, not returned.
	_, err = Square.Remote(ctx, c, 1, ray.Resources{ray.CPU: 64}).Get(ctx)
	if ray.CodeOf(err) != ray.Infeasible {
		return fmt.Errorf("64 CPUs on 4-CPU nodes: want an Infeasible error, got %v", err)
	}
	fmt.Fprintf(w, "expected error, asking for 64 CPUs: %v\n  %v\n", ray.CodeOf(err), err)
	return nil
}
