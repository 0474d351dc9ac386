package fake_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runs counts the runs of the real task functions by name.
var runs struct {
	square, fail atomic.Int64
}

// started is signalled by blocking work once it runs.
var started = make(chan struct{}, 1)

// nestedCluster is the cluster the nested task submits to.
var nestedCluster atomic.Pointer[ray.Cluster]

// selfHandle is the actor the selfCall method calls.
var selfHandle atomic.Pointer[ray.ActorHandle[*counter]]

type view struct {
	Task    string
	Attempt int
	Node    string
	Env     map[string]string
	Group   uint64
	Bundle  int
	Actor   uint64
}

func viewOf(ctx context.Context) view {
	rc, ok := ray.Runtime(ctx)
	if !ok {
		return view{}
	}
	return view{
		Task: rc.TaskName(), Attempt: rc.Attempt(), Node: rc.NodeName(), Env: rc.Environ(),
		Group: uint64(rc.PlacementGroupID()), Bundle: rc.BundleIndex(), Actor: uint64(rc.ActorID()),
	}
}

var (
	square = ray.NewTask("faketest.square", func(ctx context.Context, x int) (int, error) {
		runs.square.Add(1)
		return x * x, nil
	})
	fail = ray.NewTask("faketest.fail", func(ctx context.Context, msg string) (int, error) {
		runs.fail.Add(1)
		return 0, errors.New(msg)
	})
	boom = ray.NewTask("faketest.boom", func(ctx context.Context, _ int) (int, error) {
		panic("boom")
	})
	whereTask = ray.NewTask("faketest.where", func(ctx context.Context, _ int) (view, error) {
		return viewOf(ctx), nil
	})
	block = ray.NewTask("faketest.block", func(ctx context.Context, _ int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	hasValue = ray.NewTask("faketest.hasValue", func(ctx context.Context, _ int) (bool, error) {
		return ctx.Value(testKey{}) != nil, nil
	})
	nested = ray.NewTask("faketest.nested", func(ctx context.Context, x int) (int, error) {
		return square.Remote(ctx, nestedCluster.Load(), x+1).Get(ctx)
	})
)

type testKey struct{}

type counter struct{ n int }

var (
	counterClass = ray.NewActorClass("faketest.counter", func(ctx context.Context, start int) (*counter, error) {
		if start < 0 {
			return nil, errors.New("negative start")
		}
		return &counter{n: start}, nil
	})
	incr = ray.NewMethod(counterClass, "incr", func(ctx context.Context, c *counter, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
	whereMethod = ray.NewMethod(counterClass, "where", func(ctx context.Context, c *counter, _ int) (view, error) {
		return viewOf(ctx), nil
	})
	blockMethod = ray.NewMethod(counterClass, "block", func(ctx context.Context, c *counter, _ int) (int, error) {
		started <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	selfCall = ray.NewMethod(counterClass, "selfCall", func(ctx context.Context, c *counter, _ int) (int, error) {
		return incr.Remote(ctx, selfHandle.Load(), 1).Get(ctx)
	})
)

// slowGate is the channel the slow constructor waits on.
var slowGate atomic.Pointer[chan struct{}]

var (
	slowClass = ray.NewActorClass("faketest.slow", func(ctx context.Context, _ int) (*counter, error) {
		started <- struct{}{}
		<-*slowGate.Load()
		return &counter{}, nil
	})
	slowIncr = ray.NewMethod(slowClass, "incr", func(ctx context.Context, c *counter, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
)

// newCluster returns a fake backend and a cluster on it, closed when the
// test ends.
func newCluster(t *testing.T, opts *fake.Options, copts *ray.Options) (*fake.Backend, *ray.Cluster) {
	t.Helper()
	b := fake.New(opts)
	c, err := ray.NewCluster(context.Background(), b, copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}

func names(calls []fake.Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = string(c.Kind) + " " + c.Name
	}
	return out
}
