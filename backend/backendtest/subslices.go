package backendtest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// testSubslices reserves sub-slices of the v6e 4x4 slices of
// DefaultTPUNodes, as Ray's subslice_placement_group does: the first idle
// sub-slice in slice then index order, with each host's env rewritten to
// the sub-slice, and whole-slice requests passing by a slice that has a
// sub-slice reserved.
func (s *suite) testSubslices(t *testing.T) {
	s.need(t, s.h.Capabilities.Subslices, "Subslices")
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		t.Fatal(err)
	}
	sub := func(name string) *backend.SliceRequest {
		return &backend.SliceRequest{Shape: shape, Subslice: "2x4", Name: name}
	}
	whole := func(name string) *backend.SliceRequest {
		return &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: name}
	}
	setup := func(t *testing.T) (*ray.Cluster, backend.Backend, backend.SliceReserver, context.Context) {
		t.Helper()
		c, b := s.clusterOf(t, DefaultTPUNodes())
		r, ok := b.(backend.SliceReserver)
		if !ok {
			t.Fatalf("%T declares Subslices but is not a backend.SliceReserver", b)
		}
		return c, b, r, s.ctxT(t)
	}
	// reservedSubslices lists the slices' reserved sub-slice indices.
	reservedSubslices := func(t *testing.T, c *ray.Cluster) map[string][]int {
		t.Helper()
		states, err := ray.TPUSlices(context.Background(), c)
		if err != nil {
			t.Fatalf("TPUSlices: %v", err)
		}
		out := map[string][]int{}
		for _, st := range states {
			for _, ss := range st.Subslices {
				out[st.Name] = append(out[st.Name], ss.Index)
			}
			slices.Sort(out[st.Name])
		}
		return out
	}

	t.Run("Granted", func(t *testing.T) {
		is := is.New(t)
		c, b, r, ctx := setup(t)
		res, err := r.ReserveSlices(ctx, sub("sub"))
		is.NoErr(err)
		is.Equal(len(res.Slices), 1)
		rs := res.Slices[0]
		is.Equal(rs.Subslice, "2x4")
		is.Equal(len(rs.Hosts), 2) // a 2x4 of v6e is two 4-chip hosts
		is.True(rs.SubsliceID != "")
		is.Equal(len(res.Env), len(rs.Hosts)*res.BundlesPerHost)
		for i, env := range res.Env {
			is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i/res.BundlesPerHost)) // the worker ID within the sub-slice
			is.Equal(len(strings.Split(env[tpu.EnvWorkerHostnames], ",")), 2)  // the sub-slice's hosts only
			is.Equal(env[tpu.EnvName], rs.SubsliceID)                          // the sub-slice is a slice of its own
			is.Equal(env[tpu.EnvTopology], "2x4")                              // and has its own topology
		}
		is.Equal(reservedSubslices(t, c), map[string][]int{rs.Name: {rs.SubsliceIndex}})
		is.NoErr(b.RemovePlacementGroup(ctx, res.Group))
		is.Equal(len(reservedSubslices(t, c)), 0) // released
	})

	t.Run("WholeSlicesPassBy", func(t *testing.T) {
		is := is.New(t)
		c, b, r, ctx := setup(t)
		first, err := r.ReserveSlices(ctx, sub("first"))
		is.NoErr(err)
		second, err := r.ReserveSlices(ctx, sub("second"))
		is.NoErr(err)
		a := first.Slices[0].Name
		is.Equal(second.Slices[0].Name, a) // the first slice's next sub-slice
		is.True(second.Slices[0].SubsliceIndex != first.Slices[0].SubsliceIndex)
		is.Equal(len(slices.Concat(first.Slices[0].Hosts, second.Slices[0].Hosts)), 4)

		other, err := r.ReserveSlices(ctx, whole("other"))
		is.NoErr(err)
		is.True(other.Slices[0].Name != a) // the slice with sub-slices is passed by

		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = r.ReserveSlices(wctx, whole("waits"))
		cancel()
		is.True(errors.Is(err, context.DeadlineExceeded)) // no whole slice is free while sub-slices are held

		is.NoErr(b.RemovePlacementGroup(ctx, first.Group))
		is.NoErr(b.RemovePlacementGroup(ctx, second.Group))
		again, err := r.ReserveSlices(ctx, whole("again"))
		is.NoErr(err)
		is.Equal(again.Slices[0].Name, a) // whole again once its sub-slices are released
		is.NoErr(b.RemovePlacementGroup(ctx, again.Group))
		is.NoErr(b.RemovePlacementGroup(ctx, other.Group))
		is.Equal(len(reservedSubslices(t, c)), 0)
	})
}
