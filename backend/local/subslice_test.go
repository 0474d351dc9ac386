package local_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// startedTPU starts a simulator of the given slices and returns it.
func startedTPU(t *testing.T, slices ...local.TPUSliceSpec) *local.Backend {
	t.Helper()
	b, _ := startedTPUCluster(t, slices...)
	return b
}

// startedTPUCluster starts a simulator of the given slices and returns it
// and its cluster.
func startedTPUCluster(t *testing.T, slices ...local.TPUSliceSpec) (*local.Backend, *ray.Cluster) {
	t.Helper()
	b, err := local.New(local.ClusterSpec{TPUSlices: slices}, nil)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatalf("NewCluster: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}

// holdStarted and holdRelease let a test hold a TPU host with holdHost;
// the test makes them before it submits holdHost.
var holdStarted, holdRelease chan struct{}

// holdHost occupies its resources until holdRelease closes.
var holdHost = ray.NewTask("local_test.holdHost", func(ctx context.Context, _ struct{}) (struct{}, error) {
	holdStarted <- struct{}{}
	select {
	case <-holdRelease:
	case <-ctx.Done():
	}
	return struct{}{}, nil
})

// TestSubsliceWaitsForBusyHosts: a sub-slice request queues while tasks
// use every host and is granted when one finishes, with no reservation
// released in between.
func TestSubsliceWaitsForBusyHosts(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, c := startedTPUCluster(t, local.TPUSliceSpec{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	holdStarted, holdRelease = make(chan struct{}, 2), make(chan struct{})
	refs := []ray.ObjectRef[struct{}]{
		holdHost.Remote(ctx, c, struct{}{}, ray.Resources{backend.TPU: 4}),
		holdHost.Remote(ctx, c, struct{}{}, ray.Resources{backend.TPU: 4}),
	}
	<-holdStarted
	<-holdStarted // both hosts busy
	got := make(chan *backend.SliceReservation, 1)
	go func() {
		r, err := b.ReserveSlices(ctx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("2x4"), ChipsPerHost: 4}, Subslice: "2x2"})
		if err != nil {
			t.Errorf("ReserveSlices: %v", err)
		}
		got <- r
	}()
	for b.QueuedSliceRequests() == 0 { // until the request is queued behind the tasks
		select {
		case r := <-got:
			t.Fatalf("sub-slice granted while every host was busy: %+v", r)
		default:
			runtime.Gosched()
		}
	}
	close(holdRelease)
	_, err := ray.GetAll(ctx, refs)
	is.NoErr(err)
	r := <-got
	is.True(r != nil)
	is.Equal(r.Slices[0].Subslice, "2x2")
	is.Equal(b.QueuedSliceRequests(), 0)
}

// shortCtx is a context that ends soon, for requests that must wait.
func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func TestSubsliceReservation(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b := startedTPU(t, local.TPUSliceSpec{Generation: "v6e", Topology: "16x16", Subslices: []string{"4x4"}})
	req := &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("16x16")}, Subslice: "4x4", Name: "sub"}

	r0, err := b.ReserveSlices(ctx, req)
	is.NoErr(err)
	is.Equal(len(r0.Slices), 1)
	rs := r0.Slices[0]
	is.Equal(rs.Name, "v6e-256-0")
	is.Equal(rs.Subslice, "4x4")
	is.Equal(rs.SubsliceIndex, 0)
	is.Equal(rs.SubsliceID, "v6e-256-0-4x4-0")
	is.Equal(rs.Hosts, []string{"v6e-256-0-w0", "v6e-256-0-w1", "v6e-256-0-w8", "v6e-256-0-w9"})
	is.Equal(len(r0.Env), 4)
	// The env is rewritten to the sub-slice, as the device plugin does
	// (TestSubsliceEnv in package tpu pins the values).
	env := r0.Env[1]
	is.Equal(env[tpu.EnvTopology], "4x4")
	is.Equal(env[tpu.EnvAcceleratorType], "v6e-16")
	is.Equal(env[tpu.EnvHostBounds], "2,2,1")
	is.Equal(env[tpu.EnvWorkerID], "1")
	is.Equal(env[tpu.EnvName], "v6e-256-0-4x4-0")
	is.Equal(env[tpu.EnvWorkerHostnames], "v6e-256-0-w0,v6e-256-0-w1,v6e-256-0-w8,v6e-256-0-w9")

	r1, err := b.ReserveSlices(ctx, req)
	is.NoErr(err)
	is.Equal(r1.Slices[0].SubsliceIndex, 1)
	is.Equal(r1.Slices[0].Hosts, []string{"v6e-256-0-w2", "v6e-256-0-w3", "v6e-256-0-w10", "v6e-256-0-w11"})

	// The node pool is labelled with the sub-slice IDs, as GKE labels it.
	st, err := b.Snapshot(ctx)
	is.NoErr(err)
	i := slices.IndexFunc(st.Nodes, func(n backend.NodeState) bool { return n.Name == "v6e-256-0-w10" })
	is.Equal(st.Nodes[i].Labels["cloud.google.com/gke-tpu-slice-4x4-id"], "v6e-256-0-4x4-1")

	// The parent is busy: a whole-slice request waits.
	_, err = b.ReserveSlices(shortCtx(t), &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("16x16")}})
	is.True(errors.Is(err, context.DeadlineExceeded))

	states, err := b.Slices(ctx)
	is.NoErr(err)
	is.Equal(len(states[0].Subslices), 2)
	is.Equal(states[0].Subslices[1], backend.SubsliceState{
		Topology: "4x4", Index: 1, ID: "v6e-256-0-4x4-1", ReservedBy: r1.Group,
		Hosts: []string{"v6e-256-0-w2", "v6e-256-0-w3", "v6e-256-0-w10", "v6e-256-0-w11"},
	})
	is.True(!states[0].Idle)

	// Releasing sub-slice 0 frees it for the next request.
	is.NoErr(b.RemovePlacementGroup(ctx, r0.Group))
	r2, err := b.ReserveSlices(ctx, req)
	is.NoErr(err)
	is.Equal(r2.Slices[0].SubsliceIndex, 0)
	is.NoErr(b.RemovePlacementGroup(ctx, r1.Group))
	is.NoErr(b.RemovePlacementGroup(ctx, r2.Group))
	states, err = b.Slices(ctx)
	is.NoErr(err)
	is.Equal(len(states[0].Subslices), 0)
	is.True(states[0].Idle)
}

func TestSubsliceWaitsForItsParent(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b := startedTPU(t, local.TPUSliceSpec{Generation: "v6e", Topology: "4x4"})
	whole, err := b.ReserveSlices(ctx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}})
	is.NoErr(err)
	sub := &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}, Subslice: "2x2"}

	// While the whole slice is held, a sub-slice request waits and leaves
	// nothing behind when it gives up.
	_, err = b.ReserveSlices(shortCtx(t), sub)
	is.True(errors.Is(err, context.DeadlineExceeded))

	got := make(chan *backend.SliceReservation, 1)
	go func() {
		r, err := b.ReserveSlices(ctx, sub)
		if err != nil {
			t.Errorf("ReserveSlices: %v", err)
		}
		got <- r
	}()
	is.NoErr(b.RemovePlacementGroup(ctx, whole.Group))
	r := <-got
	is.True(r != nil)
	is.Equal(r.Slices[0].Hosts, []string{"v6e-16-0-w0"}) // a 2x2 of 4-chip hosts is one host
	is.Equal(r.Env[0][tpu.EnvWorkerHostnames], "v6e-16-0-w0")
	is.Equal(r.Env[0][tpu.EnvAcceleratorType], "v6e-4")
}

func TestSubsliceRequestErrors(t *testing.T) {
	ctx := context.Background()
	b := startedTPU(t, local.TPUSliceSpec{Generation: "v6e", Topology: "4x4"})
	tests := []struct {
		name string
		req  backend.SliceRequest
		code backend.Code
	}{
		{"not a sub-slice", backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}, Subslice: "1x1"}, backend.InvalidArgument},
		{"two sub-slices", backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}, Subslice: "2x2", NumSlices: 2}, backend.InvalidArgument},
		{"no such parent", backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("8x8")}, Subslice: "2x2"}, backend.Infeasible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := b.ReserveSlices(ctx, &tt.req)
			var be *backend.Error
			is.True(errors.As(err, &be))
			is.Equal(be.Code, tt.code)
		})
	}
	t.Run("spec with a bad sub-slice", func(t *testing.T) {
		is := is.New(t)
		_, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Subslices: []string{"3x3"}}}}, nil)
		is.True(err != nil)
	})
}

// TestSliceBundlesPerProcess checks the env of bundles smaller than a host:
// a v7x host's two processes (tpu.ProcessEnv) and a v6e host's chips
// (tpu.PartialHostEnv).
func TestSliceBundlesPerProcess(t *testing.T) {
	ctx := context.Background()
	t.Run("v7x two processes per host", func(t *testing.T) {
		is := is.New(t)
		b := startedTPU(t, local.TPUSliceSpec{Generation: "v7x", Topology: "2x2x2"})
		r, err := b.ReserveSlices(ctx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V7x, Topology: tpu.MustParseTopology("2x2x2")}, BundleResources: backend.Resources{backend.TPU: 2}})
		is.NoErr(err)
		is.Equal(r.BundlesPerHost, 2)
		env := r.Env[3] // host 1, process 1
		is.Equal(env[tpu.EnvWorkerID], "3")
		is.Equal(env[tpu.EnvProcessPort], "8472")
		is.Equal(env[tpu.EnvVisibleChips], "2,3")
		is.Equal(env[tpu.EnvChipsPerHostBounds], "1,2,1")
		is.Equal(env[tpu.EnvProcessAddresses], "v7x-16-0-w0:8471,v7x-16-0-w0:8472,v7x-16-0-w1:8471,v7x-16-0-w1:8472")
	})
	t.Run("v6e one chip per bundle", func(t *testing.T) {
		is := is.New(t)
		b := startedTPU(t, local.TPUSliceSpec{Generation: "v6e", Topology: "4x4"})
		r, err := b.ReserveSlices(ctx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}, BundleResources: backend.Resources{backend.TPU: 1}})
		is.NoErr(err)
		is.Equal(len(r.Env), 16)
		env := r.Env[5] // host 1, chip 1
		is.Equal(env[tpu.EnvWorkerID], "1")
		is.Equal(env[tpu.EnvVisibleChips], "1")
		is.Equal(env[tpu.EnvChipsPerHostBounds], "1,1,1")
		is.Equal(env[tpu.EnvHostBounds], "1,1,1")
	})
}

// TestRayStyleReservation reserves slices the way Ray's
// slice_placement_group does, through the per-host resources: a head
// placement group on TPU-<pod type>-head, then the workers on the slice's
// name resource.
func TestRayStyleReservation(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b := startedTPU(t, local.TPUSliceSpec{Generation: "v6e", Topology: "4x4", Count: 2, NameResource: true})
	head := func() (backend.PlacementGroupID, error) {
		return b.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{
			Strategy: backend.Pack,
			Bundles:  []backend.Bundle{{Resources: backend.Resources{"TPU-v6e-16-head": 1}}},
		})
	}
	nodesOf := func(id backend.PlacementGroupID) []string {
		st, err := b.Snapshot(ctx)
		is.NoErr(err)
		for _, pg := range st.PlacementGroups {
			if pg.ID == id {
				return pg.Nodes
			}
		}
		return nil
	}
	h0, err := head()
	is.NoErr(err)
	is.NoErr(b.PlacementGroupReady(ctx, h0))
	h1, err := head()
	is.NoErr(err)
	is.NoErr(b.PlacementGroupReady(ctx, h1))
	heads := slices.Concat(nodesOf(h0), nodesOf(h1))
	slices.Sort(heads)
	is.Equal(heads, []string{"v6e-16-0-w0", "v6e-16-1-w0"}) // one head unit per slice, on worker 0
	h2, err := head()
	is.NoErr(err)
	is.True(errors.Is(b.PlacementGroupReady(shortCtx(t), h2), context.DeadlineExceeded)) // no third slice

	bundle := backend.Bundle{Resources: backend.Resources{"v6e-16-1": 1, backend.TPU: 4}}
	workers, err := b.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{
		Strategy: backend.StrictSpread, Bundles: []backend.Bundle{bundle, bundle, bundle, bundle},
	})
	is.NoErr(err)
	is.NoErr(b.PlacementGroupReady(ctx, workers))
	got := nodesOf(workers)
	slices.Sort(got)
	is.Equal(got, []string{"v6e-16-1-w0", "v6e-16-1-w1", "v6e-16-1-w2", "v6e-16-1-w3"})
}
