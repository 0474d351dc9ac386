package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// noChipsRunner is a runner whose workers outside slice reservations
// hold no chips, as the Kubernetes backend's CPU pods.
type noChipsRunner struct{ *testRunner }

func (noChipsRunner) ChipsOutsideReservations() bool { return false }

// A runner whose workers outside reservations hold no chips makes TPU
// work there Infeasible, saying to reserve a slice; the same work in a
// slice reservation's bundle runs.
func TestChipsOnlyInReservations(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, namedHosts(1))
	rt, err := cluster.New(src, noChipsRunner{newTestRunner()}, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(context.Background(), nodeExec{}))
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "outside a slice reservation")) // says why
	is.True(strings.Contains(err.Error(), "ray.NewSlicePlacementGroup"))  // and what to do
	_, err = rt.CreateActor(ctx, &backend.ActorSpec{Class: "c", Scheduling: backend.Scheduling{Resources: backend.Resources{backend.TPU: 4}, Placement: backend.Placement{Bundle: -1}}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	_, err = rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{{Resources: backend.Resources{backend.TPU: 2}}}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "bundle 0"))

	node, err := runOn(t, rt, backend.Resources{backend.CPU: 1}, backend.Placement{})
	is.NoErr(err) // work without chips runs anywhere
	is.True(node != "")

	r, err := rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, NumSlices: 1})
	is.NoErr(err)
	node, err = runOn(t, rt, backend.Resources{backend.TPU: 4}, backend.Placement{Group: r.Group, Bundle: 0})
	is.NoErr(err) // in a reservation's bundle, chips are the pods'
	is.Equal(node, "s0-w0")
	is.NoErr(rt.RemovePlacementGroup(ctx, r.Group))
}
