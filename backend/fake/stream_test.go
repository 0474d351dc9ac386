package fake_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

type fakeTicker struct{ n int }

var (
	fakeTickerClass = ray.NewActorClass("fake_test.ticker", func(ctx context.Context, _ struct{}) (*fakeTicker, error) {
		return &fakeTicker{}, nil
	})
	fakeTicks = ray.NewStreamMethod(fakeTickerClass, "ticks", func(ctx context.Context, t *fakeTicker, n int, yield func(int) error) error {
		for range n {
			t.n++
			if err := yield(t.n); err != nil {
				return err
			}
		}
		return nil
	})
	fakeCount = ray.NewStreamTask("fake_test.count", func(ctx context.Context, n int, yield func(int) error) error {
		for i := range n {
			if err := yield(i); err != nil {
				return err
			}
		}
		return nil
	})
)

// Streams work on the fake, which runs calls in the caller's goroutine:
// more values than the buffer, and a stream closed half way ends its
// method (no goroutine left: the package's TestMain checks).
func TestStreams(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, fake.New(nil), nil)
	is.NoErr(err)
	defer c.Close()
	n := 0
	for v, err := range fakeCount.Remote(ctx, c, 50, ray.StreamBuffer(2)).All(ctx) {
		is.NoErr(err)
		is.Equal(v, n)
		n++
	}
	is.Equal(n, 50)
	h := fakeTickerClass.Remote(ctx, c, struct{}{})
	n = 0
	for v, err := range fakeTicks.Remote(ctx, h, 40, ray.StreamBuffer(2)).All(ctx) {
		is.NoErr(err)
		n++
		is.Equal(v, n)
	}
	is.Equal(n, 40)
	s := fakeTicks.Remote(ctx, h, 1<<30, ray.StreamBuffer(2))
	v, err := s.Next(ctx)
	is.NoErr(err)
	is.Equal(v, 41)
	s.Close() // the method stops yielding
}

var fakeAdd = ray.NewMethod(fakeTickerClass, "add", func(ctx context.Context, t *fakeTicker, n int) (int, error) {
	t.n += n
	return t.n, nil
})

var fakeEcho = ray.NewTask("fake_test.echo", func(ctx context.Context, s string) (string, error) { return s, nil })

// Cancel on the fake: work has finished by the time its ref exists, so it
// keeps its result; a Put value is refused, and Force on an actor call.
func TestCancel(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, fake.New(nil), nil)
	is.NoErr(err)
	defer c.Close()
	ref := fakeEcho.Remote(ctx, c, "kept")
	is.NoErr(ref.Cancel(ctx, ray.Force()))
	v, err := ref.Get(ctx)
	is.NoErr(err)
	is.Equal(v, "kept")
	h := fakeTickerClass.Remote(ctx, c, struct{}{})
	call := fakeAdd.Remote(ctx, h, 2)
	is.NoErr(call.Cancel(ctx))
	is.Equal(ray.CodeOf(call.Cancel(ctx, ray.Force())), ray.InvalidArgument)
	n, err := call.Get(ctx)
	is.NoErr(err)
	is.Equal(n, 2)
	is.Equal(ray.CodeOf(ray.Put(ctx, c, 1).Cancel(ctx)), ray.InvalidArgument) // not a task's result
}
