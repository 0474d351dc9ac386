package ray_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

var nilTestEcho = ray.NewTask("niltest.echo", func(ctx context.Context, x int) (int, error) { return x, nil })

// TestNilInputsAreErrors: a nil *Task, *StreamTask or slice placement group
// and a negative SliceSpec.Timeout are InvalidArgument errors that say what
// to do, not panics (before, each panicked with a nil dereference, and a
// negative Timeout was taken as an already expired deadline).
func TestNilInputsAreErrors(t *testing.T) {
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 20*time.Second)
	var nilTask *ray.Task[struct{}, map[string]string]
	var nilStream *ray.StreamTask[int, int]

	cases := []struct {
		name string
		run  func() error
		want string // in the message
	}{
		{"Task.Remote", func() error { _, err := nilTask.Remote(ctx, c, struct{}{}).Get(ctx); return err }, "ray.NewTask"},
		{"Task.RemoteRef", func() error {
			_, err := nilTask.RemoteRef(ctx, c, ray.Put(ctx, c, struct{}{})).Get(ctx)
			return err
		}, "ray.NewTask"},
		{"StreamTask.Remote", func() error { _, err := nilStream.Remote(ctx, c, 1).Next(ctx); return err }, "ray.NewStreamTask"},
		{"RunOnSlice nil task", func() error {
			spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
			if err != nil {
				return err
			}
			defer spg.Release(ctx)
			_, err = ray.RunOnSlice(ctx, spg, nilTask, struct{}{})
			return err
		}, "ray.NewTask"},
		{"RunOnSlice nil slice group", func() error { _, err := ray.RunOnSlice(ctx, nil, sliceWorker, struct{}{}); return err }, "ray.NewSlicePlacementGroup"},
		{"Dispatch nil task", func() error { _, err := ray.Dispatch(ctx, c, spec4x4, nilTask, struct{}{}); return err }, "ray.NewTask"},
		{"negative Timeout", func() error {
			spec := spec4x4
			spec.Timeout = -time.Second
			_, err := ray.NewSlicePlacementGroup(ctx, c, spec)
			return err
		}, "Timeout is -1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			err := tc.run()
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			is.True(strings.Contains(err.Error(), tc.want)) // says what to do
		})
	}
	is := is.New(t)
	ref := nilTestEcho.Remote(ctx, c, 1)
	_, err := ref.Get(ctx)
	is.NoErr(err)
	is.NoErr(ref.Cancel(ctx, nil)) // a nil option is ignored (it panicked when options were funcs)
	is.Equal(nilTask.Name(), "")
	is.Equal(nilStream.Name(), "")
	assertAllFree(t, c) // nothing was left reserved or running
}
