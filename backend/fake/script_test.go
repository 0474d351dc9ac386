package fake_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

var errNodeLost = backend.Errorf(backend.Unavailable, "", "node lost")

func attempts(calls []fake.Call) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = c.Attempt
	}
	return out
}

func TestScripts(t *testing.T) {
	ctx := context.Background()

	t.Run("SetResult replaces the function", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetResult("faketest.square", 100)
		before := runs.square.Load()
		v, err := square.Remote(ctx, c, 3).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 100)
		is.Equal(runs.square.Load(), before) // the real function did not run
		calls := b.CallsTo("faketest.square")
		is.Equal(len(calls), 1)
		is.True(calls[0].Ran)
		var out int
		is.NoErr(calls[0].DecodeResult(&out))
		is.Equal(out, 100)
	})

	t.Run("SetError with a plain error is a TaskFailed TaskError", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetResult("faketest.square", 100)
		b.SetError("faketest.square", errors.New("quota exceeded")) // replaces the result
		for range 2 {
			_, err := square.Remote(ctx, c, 3).Get(ctx)
			is.Equal(ray.CodeOf(err), ray.TaskFailed)
			var te *ray.TaskError
			is.True(errors.As(err, &te))
			is.Equal(*te, ray.TaskError{Task: "faketest.square", Message: "quota exceeded"})
		}
		b.SetError("faketest.square", nil) // back to the real function
		v, err := square.Remote(ctx, c, 3).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 9)
	})

	t.Run("SetError with a goray error keeps it", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		want := backend.Errorf(backend.ResourceExhausted, "fetch", "too big")
		b.SetError("faketest.square", want)
		_, err := square.Remote(ctx, c, 3).Get(ctx)
		is.Equal(err, want)
		b.SetError("faketest.square", fmt.Errorf("wrapped: %w", backend.ErrResourceExhausted))
		_, err = square.Remote(ctx, c, 3).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ResourceExhausted) // code found in the chain
	})

	t.Run("FailNext with Unavailable is retried per Retries", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.FailNext("faketest.where", 2, errNodeLost)
		v, err := whereTask.Remote(ctx, c, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v.Attempt, 2) // the real function ran as the third attempt
		calls := b.CallsTo("faketest.where")
		is.Equal(attempts(calls), []int{0, 1, 2})
		is.Equal(calls[0].Err, errNodeLost)
		is.Equal(calls[1].Err, errNodeLost)
		is.NoErr(calls[2].Err)
	})

	t.Run("retries run out", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetError("faketest.square", errNodeLost)
		_, err := square.Remote(ctx, c, 1).Get(ctx) // default: 3 retries
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.Equal(attempts(b.CallsTo("faketest.square")), []int{0, 1, 2, 3})
		b.ClearCalls()
		_, err = square.Remote(ctx, c, 1, ray.Retries(0)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.Equal(attempts(b.CallsTo("faketest.square")), []int{0})
	})

	t.Run("unlimited retries stop at RetryLimit", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, &fake.Options{RetryLimit: 5}, nil)
		b.SetError("faketest.square", errNodeLost)
		_, err := square.Remote(ctx, c, 1, ray.Retries(-1)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.Equal(len(b.CallsTo("faketest.square")), 5)
	})

	t.Run("task errors are retried only with RetryOnError", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.FailNext("faketest.square", 3, errors.New("flaky"))
		_, err := square.Remote(ctx, c, 2).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed) // not retried
		is.Equal(attempts(b.CallsTo("faketest.square")), []int{0})

		b.ClearCalls()
		_, err = square.Remote(ctx, c, 2, ray.RetryOnError(true), ray.Retries(1)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed) // both queued failures used up
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.Equal(te.Attempt, 1)
		is.Equal(attempts(b.CallsTo("faketest.square")), []int{0, 1})

		v, err := square.Remote(ctx, c, 2).Get(ctx) // queue empty: the real function
		is.NoErr(err)
		is.Equal(v, 4)
	})

	t.Run("real task errors are retried with RetryOnError", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		before := runs.fail.Load()
		_, err := fail.Remote(ctx, c, "always", ray.RetryOnError(true), ray.Retries(2)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.Equal(runs.fail.Load(), before+3)
		is.Equal(attempts(b.CallsTo("faketest.fail")), []int{0, 1, 2})
	})

	t.Run("method scripts", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 10)
		b.SetResult("faketest.counter.incr", 42)
		v, err := incr.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 42)
		b.FailNext("faketest.counter.incr", 1, errNodeLost) // methods are not retried
		_, err = incr.Remote(ctx, h, 1).Get(ctx)
		is.Equal(err, errNodeLost)
		b.Reset() // scripts gone
		v, err = incr.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 11) // the scripted calls did not touch the actor
		is.Equal(len(b.Calls()), 2)
	})

	t.Run("constructor scripts", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.FailNext("faketest.counter", 1, errors.New("no capacity"))
		h := counterClass.Remote(ctx, c, 0)
		err := h.Ready(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.True(strings.Contains(err.Error(), "no capacity"))
		_, err = incr.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.NoErr(counterClass.Remote(ctx, c, 0).Ready(ctx)) // the queue is used up

		b.SetResult("faketest.counter", 1)
		err = counterClass.Remote(ctx, c, 0).Ready(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.True(strings.Contains(err.Error(), "use SetError or FailNext"))
	})

	t.Run("SetResult panics on a value the codec cannot encode", func(t *testing.T) {
		is := is.New(t)
		b := fake.New(nil)
		defer func() {
			r := recover()
			is.True(r != nil)
			is.True(strings.Contains(fmt.Sprint(r), "faketest.square"))
		}()
		b.SetResult("faketest.square", make(chan int))
	})
}

func TestReactors(t *testing.T) {
	ctx := context.Background()

	t.Run("a reactor computes the result from the arg", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.PrependReactor(fake.KindTask, "faketest.square", func(call fake.Call) (bool, any, error) {
			var x int
			if err := call.DecodeArg(&x); err != nil {
				return true, nil, err
			}
			return true, -x, nil
		})
		v, err := square.Remote(ctx, c, 5).Get(ctx)
		is.NoErr(err)
		is.Equal(v, -5)
	})

	t.Run("reactors run newest first and may pass", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		var seen []string
		b.PrependReactor(fake.KindAny, "*", func(call fake.Call) (bool, any, error) {
			seen = append(seen, "old")
			return true, 1, nil
		})
		b.PrependReactor(fake.KindTask, "*", func(call fake.Call) (bool, any, error) {
			seen = append(seen, "new")
			return false, nil, nil
		})
		b.SetResult("faketest.square", 2) // reactors come before scripts
		v, err := square.Remote(ctx, c, 5).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
		is.Equal(seen, []string{"new", "old", "old"}) // task (new, old), then get (old)
	})

	t.Run("reactor failures are retried like scripts", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.PrependReactor(fake.KindTask, "faketest.where", func(call fake.Call) (bool, any, error) {
			return call.Attempt == 0, nil, errNodeLost
		})
		v, err := whereTask.Remote(ctx, c, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v.Attempt, 1)
	})

	t.Run("reactors inject failures into other calls", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.PrependReactor(fake.KindPlacementGroup, "slices", func(call fake.Call) (bool, any, error) {
			return true, nil, backend.Errorf(backend.Infeasible, "", "no v6e slice of topology %s", call.GroupSpec.Bundles[0].LabelSelector["topology"])
		})
		b.PrependReactor(fake.KindPut, "*", func(call fake.Call) (bool, any, error) {
			return true, nil, errors.New("store full")
		})
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Name: "slices", Bundles: []ray.Bundle{{Resources: ray.Resources{ray.TPU: 4}, LabelSelector: ray.NodeSelector{"topology": "4x4"}}}})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.Equal(err.Error(), "no v6e slice of topology 4x4")
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Name: "other", Bundles: []ray.Bundle{{Resources: ray.Resources{ray.TPU: 4}}}})
		is.NoErr(err)
		err = ray.Put(ctx, c, 1).Err()
		is.Equal(ray.CodeOf(err), ray.Unknown)
		var e *backend.Error
		is.True(errors.As(err, &e))
		calls := b.CallsOf(fake.KindPlacementGroup)
		is.Equal(len(calls), 2)
		is.Equal(ray.CodeOf(calls[0].Err), ray.Infeasible)
	})

	t.Run("a reactor may call the fake", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.PrependReactor(fake.KindTask, "faketest.square", func(call fake.Call) (bool, any, error) {
			return true, len(b.Calls()), nil
		})
		v, err := square.Remote(ctx, c, 5).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
	})
}

func TestRecording(t *testing.T) {
	ctx := context.Background()

	t.Run("calls in order with their options", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		put := ray.Put(ctx, c, 2)
		ref := square.RemoteRef(ctx, c, put, ray.Resources{ray.TPU: 4}, ray.NodeSelector{"pool": "v6e"},
			ray.Retries(5), ray.RetryOnError(true), ray.Name("step-1"))
		_, err := ref.Get(ctx)
		is.NoErr(err)
		h := counterClass.Remote(ctx, c, 1, ray.Name("ctr"))
		is.NoErr(h.Ready(ctx))
		_, err = ray.GetActor(ctx, c, counterClass, "ctr")
		is.NoErr(err)
		is.NoErr(h.Kill(ctx))
		is.Equal(names(b.Calls()), []string{
			"put ", "task faketest.square", "get ", "actor faketest.counter",
			"actorReady faketest.counter", "namedActor ctr", "kill faketest.counter",
		})
		calls := b.Calls()
		is.Equal(calls[0].Object, put.ID())
		task := calls[1]
		is.Equal(task.Ref, put.ID())
		is.Equal(task.Object, ref.ID())
		is.Equal(*task.TaskSpec, backend.TaskSpec{
			Name: "faketest.square", Arg: backend.Arg{Ref: put.ID()},
			Scheduling: backend.Scheduling{
				Resources:    backend.Resources{backend.CPU: 1, backend.TPU: 4},
				NodeSelector: backend.LabelSelector{"pool": "v6e"},
				Placement:    backend.Placement{Bundle: -1},
			},
			MaxRetries: 5, RetryOnError: true, DisplayName: "step-1",
		})
		is.Equal(calls[2].Object, ref.ID())
		var got int
		is.NoErr(calls[2].DecodeResult(&got))
		is.Equal(got, 4)
		is.Equal(calls[3].ActorSpec.Name, "ctr")
		is.Equal(calls[3].Actor, h.ID())
		is.Equal(calls[5].Actor, h.ID())
	})

	t.Run("ClearCalls keeps scripts, Reset drops them", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetResult("faketest.square", 0)
		_ = square.Remote(ctx, c, 1)
		b.ClearCalls()
		is.Equal(len(b.Calls()), 0)
		v, err := square.Remote(ctx, c, 3).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 0)
		b.Reset()
		is.Equal(len(b.Calls()), 0)
		v, err = square.Remote(ctx, c, 3).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 9)
	})

	t.Run("deterministic IDs and log", func(t *testing.T) {
		is := is.New(t)
		logOf := func() []string {
			b, c := newCluster(t, nil, nil)
			h := counterClass.Remote(ctx, c, 0)
			_ = incr.RemoteRef(ctx, h, square.RemoteRef(ctx, c, ray.Put(ctx, c, 2)))
			var out []string
			for _, call := range b.Calls() {
				out = append(out, fmt.Sprintf("%s %s obj=%d actor=%d", call.Kind, call.Name, call.Object, call.Actor))
			}
			return out
		}
		is.Equal(logOf(), logOf())
	})
}

func TestScriptEdges(t *testing.T) {
	ctx := context.Background()

	t.Run("unlimited retries stop at DefaultRetryLimit", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetError("faketest.square", errNodeLost)
		_, err := square.Remote(ctx, c, 1, ray.Retries(-1)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.Equal(len(b.CallsTo("faketest.square")), fake.DefaultRetryLimit)
	})

	t.Run("a reactor result the codec cannot encode", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.PrependReactor(fake.KindTask, "faketest.square", func(call fake.Call) (bool, any, error) {
			return true, func() {}, nil
		})
		_, err := square.Remote(ctx, c, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})

	t.Run("a raw backend.Value result", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		b.SetResult("faketest.square", backend.Value{Data: []byte("12")})
		v, err := square.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 12)
	})

	t.Run("decode errors", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, &ray.Options{DisableCodec: true})
		_ = square.Remote(ctx, c, 1)
		call := b.CallsTo("faketest.square")[0]
		var s string
		var n int
		is.True(call.DecodeArg(n) != nil)  // not a pointer
		is.True(call.DecodeArg(&s) != nil) // an int, unencoded
		is.True(fake.Call{}.DecodeArg(&n) != nil)
	})

	t.Run("misuse panics", func(t *testing.T) {
		is := is.New(t)
		b := fake.New(nil)
		panics := func(f func()) (r any) {
			defer func() { r = recover() }()
			f()
			return nil
		}
		is.True(panics(func() { b.FailNext("x", 1, nil) }) != nil)
		is.True(panics(func() { b.PrependReactor(fake.KindAny, "*", nil) }) != nil)
	})
}
