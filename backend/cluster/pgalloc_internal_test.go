package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestPlacementGroupWaitAndReplace: a group waits for room (its ready
// channel made by the waiter), is placed when room is freed, is placed
// again on another node when its node dies (Ready waits again, on a new
// channel), and its bundle's free amounts (kept in its demand's spare
// capacity) hold exactly the bundle's resources after each placement: a
// task of the bundle's whole CPU runs there, a second one waits for it.
func TestPlacementGroupWaitAndReplace(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	gate := make(chan struct{})
	started := make(chan string, 16)
	x := &claimExec{run: func(ctx context.Context, attempt int) (backend.Value, error) {
		started <- "task"
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return backend.Value{Data: []byte("ok")}, nil
	}}
	nodes := []Node{{Name: "a", Resources: backend.Resources{backend.CPU: 2}}, {Name: "b", Resources: backend.Resources{backend.CPU: 2}}}
	rt, err := New(NewStaticSource(nodes), GoroutineRunner{}, Options{NativeValues: true})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, x))
	defer rt.Close()
	one := func(cpu float64) *backend.PlacementGroupSpec {
		return &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{{Resources: backend.Resources{backend.CPU: cpu}}}}
	}
	// Two groups of 2 CPUs fill the cluster; a third waits.
	g1, err := rt.CreatePlacementGroup(ctx, one(2))
	is.NoErr(err)
	g2, err := rt.CreatePlacementGroup(ctx, one(2))
	is.NoErr(err)
	is.NoErr(rt.PlacementGroupReady(ctx, g1))
	is.NoErr(rt.PlacementGroupReady(ctx, g2))
	g3, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{
		{Resources: backend.Resources{backend.CPU: 1}}, {Resources: backend.Resources{backend.CPU: 1}}}})
	is.NoErr(err)
	ready := make(chan error, 1)
	go func() { ready <- rt.PlacementGroupReady(ctx, g3) }()
	is.NoErr(rt.RemovePlacementGroup(ctx, g1))
	is.NoErr(<-ready)
	is.NoErr(rt.RemovePlacementGroup(ctx, g2))
	is.NoErr(rt.RemovePlacementGroup(ctx, g3))

	g4, err := rt.CreatePlacementGroup(ctx, one(1))
	is.NoErr(err)
	is.NoErr(rt.PlacementGroupReady(ctx, g4))
	rt.mu.Lock()
	first := rt.pgs[g4].bundles[0].node.name
	rt.mu.Unlock()
	inBundle := func() backend.ObjectID {
		id, err := rt.SubmitTask(ctx, &backend.TaskSpec{Name: "t", Scheduling: backend.Scheduling{
			Resources: backend.Resources{backend.CPU: 1}, Placement: backend.Placement{Group: g4, Bundle: 0}}})
		is.NoErr(err)
		return id
	}
	for round := range 2 {
		a, b := inBundle(), inBundle()
		<-started // one runs; the bundle has 1 CPU, so the other waits
		rt.mu.Lock()
		bu := rt.pgs[g4].bundles[0]
		free, demand, running := slices.Clone(bu.free), slices.Clone(bu.demand), rt.running
		none, cpu1 := rt.vector(nil), rt.vector(backend.Resources{backend.CPU: 1})
		rt.mu.Unlock()
		is.Equal(free, none)
		is.Equal(demand, cpu1)
		is.Equal(running, 1)
		gate <- struct{}{}
		<-started
		gate <- struct{}{}
		for _, id := range []backend.ObjectID{a, b} {
			v, err := rt.Get(ctx, id)
			is.NoErr(err)
			is.Equal(string(v.Data), "ok")
		}
		if round == 1 {
			break
		}
		is.NoErr(rt.KillNode(ctx, first)) // the group is placed again, on the other node
		is.NoErr(rt.PlacementGroupReady(ctx, g4))
		rt.mu.Lock()
		node, free := rt.pgs[g4].bundles[0].node.name, slices.Clone(rt.pgs[g4].bundles[0].free)
		cpu1 = rt.vector(backend.Resources{backend.CPU: 1})
		rt.mu.Unlock()
		is.True(node != first)
		is.Equal(free, cpu1)
	}
}

// TestBundleDemandChecks: what the one-pass bundle demand accepts, the
// full checks accept too, and what it refuses they refuse with the
// error that says why.
func TestBundleDemandChecks(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	rt, err := New(NewStaticSource([]Node{{Name: "a", Resources: backend.Resources{backend.CPU: 2, "disk": 1}}}), GoroutineRunner{}, Options{NativeValues: true})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, echoExec{}))
	defer rt.Close()
	for _, c := range []struct {
		res  backend.Resources
		code backend.Code
		msg  string
	}{
		{backend.Resources{backend.CPU: 1, "disk": 0.5}, backend.OK, ""},
		{backend.Resources{backend.CPU: 1, "GPU": 0}, backend.OK, ""}, // a name no node has, asked 0 of
		{backend.Resources{backend.CPU: 1, "GPU": 1}, backend.Infeasible, `no node has resource "GPU"`},
		{backend.Resources{backend.CPU: 1e-9}, backend.InvalidArgument, "rounds to 0"},
	} {
		id, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Bundles: []backend.Bundle{{Resources: c.res}}})
		is.Equal(backend.CodeOf(err), c.code)
		if c.code != backend.OK {
			is.True(strings.Contains(err.Error(), c.msg))
			continue
		}
		rt.mu.Lock()
		demand, want := rt.pgs[id].bundles[0].demand, rt.vector(c.res)
		rt.mu.Unlock()
		is.Equal(demand, want)
		is.NoErr(rt.RemovePlacementGroup(ctx, id))
	}
}
