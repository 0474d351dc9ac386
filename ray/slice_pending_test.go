package ray_test

import (
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

// TestPendingSliceRequests: requests waiting for busy slices are reported
// in the order they will be served, and leave the list when granted or
// when they give up.
func TestPendingSliceRequests(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 10*time.Second)
	pending, err := ray.PendingSliceRequests(ctx, c)
	is.NoErr(err)
	is.Equal(len(pending), 0)

	held, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	granted := make(chan *ray.SlicePlacementGroup, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "next"})
		if err != nil {
			t.Error(err)
		}
		granted <- spg
	}()
	waitQueued(t, c)
	pending, err = ray.PendingSliceRequests(ctx, c)
	is.NoErr(err)
	is.Equal(len(pending), 1)
	p := pending[0]
	is.Equal([]any{p.Name, p.Generation, p.Topology, p.ChipsPerHost, p.NumSlices}, []any{"next", "v6e", "4x4", 4, 1})
	is.True(!p.Since.IsZero() && !p.Since.After(time.Now()))

	is.NoErr(held.Release(ctx))
	next := <-granted
	is.True(next != nil)
	is.NoErr(next.Release(ctx))
	pending, err = ray.PendingSliceRequests(ctx, c)
	is.NoErr(err)
	is.Equal(len(pending), 0)
	assertAllFree(t, c)
}

func TestPendingSliceRequestsErrors(t *testing.T) {
	cases := []struct {
		name string
		b    backend.Backend
		code ray.ErrorCode
	}{
		// Embedding the interface hides the fake's SliceReserver.
		{"no slices", struct{ backend.Backend }{fake.New(nil)}, ray.Unimplemented},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			c, err := ray.NewCluster(t.Context(), tc.b, nil)
			is.NoErr(err)
			defer c.Close()
			_, err = ray.PendingSliceRequests(t.Context(), c)
			is.Equal(ray.CodeOf(err), tc.code)
		})
	}
	t.Run("closed", func(t *testing.T) {
		is := is.New(t)
		c := tpuCluster(t, v6e(1))
		is.NoErr(c.Close())
		_, err := ray.PendingSliceRequests(t.Context(), c)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	})
}
