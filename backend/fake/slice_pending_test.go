package fake_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

// TestPendingSliceRequests: a reservation that a reactor holds up is
// reported as pending, with its resolved shape, until it returns.
func TestPendingSliceRequests(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b := fake.New(nil)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()

	entered, release := make(chan struct{}), make(chan struct{})
	b.PrependReactor(fake.KindPlacementGroup, "held", func(fake.Call) (bool, any, error) {
		close(entered)
		<-release
		return false, nil, nil // then reserve as usual
	})
	done := make(chan error, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "TPU-V6E", NumSlices: 2, Name: "held"})
		if err == nil {
			err = spg.Release(ctx)
		}
		done <- err
	}()
	<-entered
	pending, err := ray.PendingSliceRequests(ctx, c)
	is.NoErr(err)
	is.Equal(len(pending), 1)
	p := pending[0]
	is.Equal([]any{p.Name, p.Generation, p.Topology, p.ChipsPerHost, p.NumSlices}, []any{"held", "v6e", "4x4", 4, 2})
	is.True(!p.Since.IsZero())

	close(release)
	is.NoErr(<-done)
	pending, err = ray.PendingSliceRequests(ctx, c)
	is.NoErr(err)
	is.Equal(len(pending), 0)

	is.NoErr(c.Close())
	_, err = ray.PendingSliceRequests(ctx, c)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
}
