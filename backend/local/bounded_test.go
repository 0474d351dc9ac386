package local_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var (
	boundedGates sync.Map // int -> chan struct{}
	// boundedWait returns its input once the gate of that input closes.
	boundedWait = ray.NewTask("localtest.boundedWait", func(ctx context.Context, x int) (int, error) {
		g, _ := boundedGates.Load(x)
		select {
		case <-g.(chan struct{}):
			return x, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	boundedAdd   = ray.NewTask("localtest.boundedAdd", func(ctx context.Context, x int) (int, error) { return x + 1, nil })
	boundedActor = ray.NewActorClass("localtest.boundedActor", func(ctx context.Context, _ int) (*struct{}, error) { return &struct{}{}, nil })
	boundedPing  = ray.NewMethod(boundedActor, "ping", func(ctx context.Context, _ *struct{}, x int) (int, error) { return x, nil })
)

func boundedCluster(t *testing.T) (*ray.Cluster, *local.Backend) {
	t.Helper()
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Count: 2, Resources: backend.Resources{backend.CPU: 8}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, b
}

// rejectShapes submits n distinct shapes that fail at once, each leaving
// an idle scheduling class to sweep.
func rejectShapes(ctx context.Context, c *ray.Cluster, n int) {
	for i := range n {
		boundedAdd.Remote(ctx, c, i, ray.Resources{ray.CPU: 100 + float64(i)/100}).Release() // Infeasible
	}
}

// TestSweptClassesStillServeTheirTasks: a task waiting for its input when
// its scheduling class is swept as idle still runs when the input is
// ready, and one pinned to a group then queues in a class the group knows,
// so removing the group fails it instead of leaving it queued forever.
func TestSweptClassesStillServeTheirTasks(t *testing.T) {
	is := is.New(t)
	c, _ := boundedCluster(t)
	ctx := testCtx(t)
	gate := make(chan struct{})
	boundedGates.Store(41, gate)
	defer boundedGates.Delete(41)
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
	is.NoErr(err)
	parkTask.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 1}) // fills the bundle
	<-parked
	in := boundedWait.Remote(ctx, c, 41)
	free := boundedAdd.RemoteRef(ctx, c, in, ray.Resources{ray.CPU: 0.25})
	pinned := boundedAdd.RemoteRef(ctx, c, in, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0.5})
	rejectShapes(ctx, c, 5000) // several sweeps while both wait for in
	close(gate)
	v, err := free.Get(ctx) // in is done: pinned is queued behind the parked task
	is.NoErr(err)
	is.Equal(v, 42)
	is.NoErr(pg.Remove(ctx))
	_, err = pinned.Get(ctx)
	is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
}

// TestTombstoneWindow: past local.TombstoneWindow, a dead actor or a
// removed group is forgotten but late callers still get the right code;
// an ID never issued is NotFound.
func TestTombstoneWindow(t *testing.T) {
	is := is.New(t)
	c, b := boundedCluster(t)
	ctx := testCtx(t)
	first := boundedActor.Remote(ctx, c, 0)
	is.NoErr(first.Ready(ctx))
	is.NoErr(first.Kill(ctx))
	firstPG, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
	is.NoErr(err)
	is.NoErr(firstPG.Remove(ctx))
	for i := range local.TombstoneWindow + 10 {
		h := boundedActor.Remote(ctx, c, i)
		is.NoErr(h.Kill(ctx))
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		is.NoErr(pg.Remove(ctx))
	}
	_, err = boundedPing.Remote(ctx, first, 1).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.ActorDied) // a call on a long-dead actor
	is.Equal(ray.CodeOf(first.Ready(ctx)), ray.ActorDied)
	is.NoErr(first.Kill(ctx)) // killing it again is still not an error
	_, err = boundedAdd.Remote(ctx, c, 1, ray.InBundle(firstPG, 0)).Get(ctx)
	is.True(errors.Is(err, ray.ErrPlacementGroupRemoved)) // work for a long-removed group
	is.True(errors.Is(firstPG.Ready(ctx), ray.ErrPlacementGroupRemoved))
	is.NoErr(firstPG.Remove(ctx))
	is.Equal(ray.CodeOf(b.ActorReady(ctx, 1<<40)), ray.NotFound) // never issued
	is.Equal(ray.CodeOf(b.PlacementGroupReady(ctx, 1<<40)), ray.NotFound)
}

// TestNoLiveNode: when every node is dead, an Infeasible error says so
// instead of blaming a selector nobody set.
func TestNoLiveNode(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Count: 3, Resources: backend.Resources{backend.CPU: 2}}}}, nil)
	is.NoErr(err)
	ctx := testCtx(t)
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	for i := range 3 {
		is.NoErr(b.KillNode(ctx, "n-"+strconv.Itoa(i)))
	}
	_, err = boundedAdd.Remote(ctx, c, 1).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	is.True(strings.Contains(err.Error(), "no live node: 3 dead"))
	is.True(!strings.Contains(err.Error(), "selector"))
	_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	is.True(strings.Contains(err.Error(), "no live node: 3 dead"))
}
