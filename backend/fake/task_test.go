package fake_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

func TestTasks(t *testing.T) {
	ctx := context.Background()

	t.Run("runs the real function before Remote returns", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		before := runs.square.Load()
		ref := square.Remote(ctx, c, 7)
		is.Equal(runs.square.Load(), before+1) // ran synchronously
		v, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 49)
		calls := b.CallsTo("faketest.square")
		is.Equal(len(calls), 1)
		is.Equal(calls[0].Kind, fake.KindTask)
		is.True(calls[0].Ran)
		is.Equal(calls[0].Object, ref.ID())
		var in, out int
		is.NoErr(calls[0].DecodeArg(&in))
		is.NoErr(calls[0].DecodeResult(&out))
		is.Equal(in, 7)
		is.Equal(out, 49)
	})

	t.Run("refs as inputs", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		put := ray.Put(ctx, c, 3)
		v, err := square.RemoteRef(ctx, c, square.RemoteRef(ctx, c, put)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 81)
		calls := b.CallsTo("faketest.square")
		is.Equal(len(calls), 2)
		is.Equal(calls[0].Ref, put.ID())
		var in int
		is.NoErr(calls[0].DecodeArg(&in))
		is.Equal(in, 3) // the referenced value
	})

	t.Run("failed dependency fails the dependent without running it", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		failed := fail.Remote(ctx, c, "no input")
		_, want := failed.Get(ctx)
		before := runs.square.Load()
		_, err := square.RemoteRef(ctx, c, failed).Get(ctx)
		is.Equal(runs.square.Load(), before) // never ran
		is.Equal(err, want)                  // the dependency's own error
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		calls := b.CallsTo("faketest.square")
		is.Equal(len(calls), 1)
		is.True(!calls[0].Ran)
		is.Equal(calls[0].Err, want)
	})

	t.Run("user error is TaskFailed with a TaskError", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		_, err := fail.Remote(ctx, c, "disk full").Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.Equal(te.Task, "faketest.fail")
		is.Equal(te.Message, "disk full")
		is.True(!te.Panicked)
	})

	t.Run("panic is TaskFailed with the stack", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		_, err := boom.Remote(ctx, c, 0).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.True(te.Panicked)
		is.Equal(te.Message, "boom")
		is.True(strings.Contains(te.Stack, "fake_test")) // the panicking function's frame
	})

	t.Run("wait and get all", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		refs := []ray.ObjectRef[int]{square.Remote(ctx, c, 1), square.Remote(ctx, c, 2), square.Remote(ctx, c, 3)}
		ready, notReady, err := ray.Wait(ctx, refs, 1)
		is.NoErr(err)
		is.Equal(len(ready), 3) // everything is done already
		is.Equal(len(notReady), 0)
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(vals, []int{1, 4, 9})
		is.Equal(len(b.CallsOf(fake.KindWait)), 1)
		is.Equal(len(b.CallsOf(fake.KindGet)), 3)
	})

	t.Run("nested submissions to the same backend", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		nestedCluster.Store(c)
		v, err := nested.Remote(ctx, c, 4).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 25)
		is.Equal(names(b.CallsOf(fake.KindTask)), []string{"task faketest.nested", "task faketest.square"})
	})

	t.Run("work has its own context, cancelled with the submitter's", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		v, err := hasValue.Remote(context.WithValue(ctx, testKey{}, 1), c, 0).Get(ctx)
		is.NoErr(err)
		is.True(!v) // no value of the submitter's context leaks into the task

		cctx, cancel := context.WithCancel(ctx)
		go func() {
			<-started
			cancel()
		}()
		ref := block.Remote(cctx, c, 0) // returns once the task saw the cancellation
		is.NoErr(ref.Err())
		_, err = ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.True(strings.Contains(err.Error(), "context canceled"))
	})

	t.Run("runtime info", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, &fake.Options{Env: map[string]string{"REGION": "test"}}, nil)
		v, err := whereTask.Remote(ctx, c, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v, view{Task: "faketest.where", Node: fake.NodeName, Env: map[string]string{"REGION": "test"}, Bundle: -1})
	})

	t.Run("unencoded values", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, &ray.Options{DisableCodec: true})
		v, err := square.RemoteRef(ctx, c, ray.Put(ctx, c, 5)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 25)
		b.SetResult("faketest.square", 7)
		v, err = square.Remote(ctx, c, 5).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 7)
		var in int
		is.NoErr(b.CallsTo("faketest.square")[0].DecodeArg(&in))
		is.Equal(in, 5)
	})

	t.Run("zero value backend", func(t *testing.T) {
		is := is.New(t)
		var b fake.Backend
		c, err := ray.NewCluster(ctx, &b, nil)
		is.NoErr(err)
		defer c.Close()
		v, err := square.Remote(ctx, c, 6).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 36)
		is.Equal(len(b.Calls()), 2) // task, get
	})
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	b, c := newCluster(t, nil, nil)

	cases := []struct {
		name string
		err  func() error
		code backend.Code
	}{
		{"empty task name", func() error {
			_, err := b.SubmitTask(ctx, &backend.TaskSpec{})
			return err
		}, backend.InvalidArgument},
		{"unregistered task", func() error {
			_, err := b.SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.nope"})
			return err
		}, backend.NotFound},
		{"negative resources", func() error {
			return square.Remote(ctx, c, 1, ray.Resources{ray.CPU: -1}).Err()
		}, backend.InvalidArgument},
		{"malformed node selector", func() error {
			return square.Remote(ctx, c, 1, ray.NodeSelector{"zone": "in(a"}).Err()
		}, backend.InvalidArgument},
		{"missing input object", func() error {
			_, err := b.SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.square", Arg: backend.Arg{Ref: 9999}})
			return err
		}, backend.NotFound},
		{"unknown placement group", func() error {
			_, err := b.SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.square", Scheduling: backend.Scheduling{Placement: backend.Placement{Group: 9999}}})
			return err
		}, backend.NotFound},
		{"empty actor class", func() error {
			_, err := b.CreateActor(ctx, &backend.ActorSpec{})
			return err
		}, backend.InvalidArgument},
		{"unregistered actor class", func() error {
			_, err := b.CreateActor(ctx, &backend.ActorSpec{Class: "faketest.nope"})
			return err
		}, backend.NotFound},
		{"actor constructor from a ref", func() error {
			_, err := b.CreateActor(ctx, &backend.ActorSpec{Class: "faketest.counter", Arg: backend.Arg{Ref: 1}})
			return err
		}, backend.InvalidArgument},
		{"negative actor resources", func() error {
			return counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: -4}).Err()
		}, backend.InvalidArgument},
		{"unknown actor", func() error {
			_, err := b.CallActor(ctx, &backend.CallSpec{Actor: 9999, Class: "faketest.counter", Method: "incr"})
			return err
		}, backend.NotFound},
		{"unknown object", func() error {
			_, err := b.Get(ctx, 9999)
			return err
		}, backend.NotFound},
		{"wait for unknown object", func() error {
			_, err := b.Wait(ctx, []backend.ObjectID{9999}, 1)
			return err
		}, backend.NotFound},
		{"kill unknown actor", func() error { return b.KillActor(ctx, 9999) }, backend.NotFound},
		{"unknown named actor", func() error {
			_, _, err := b.NamedActor(ctx, "nobody")
			return err
		}, backend.NotFound},
		{"remove unknown placement group", func() error { return b.RemovePlacementGroup(ctx, 9999) }, backend.NotFound},
		{"start twice", func() error { return b.Start(ctx, ray.NewExecutor(ray.JSON)) }, backend.FailedPrecondition},
		{"start without executor", func() error { return fake.New(nil).Start(ctx, nil) }, backend.InvalidArgument},
		{"call before start", func() error {
			_, err := fake.New(nil).SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.square"})
			return err
		}, backend.FailedPrecondition},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			err := tc.err()
			is.Equal(ray.CodeOf(err), tc.code) // the same code as backend/local
			var e *backend.Error
			is.True(errors.As(err, &e))
		})
	}

	t.Run("rejections are recorded", func(t *testing.T) {
		is := is.New(t)
		b.ClearCalls()
		ref := square.Remote(ctx, c, 1, ray.Resources{ray.CPU: -1})
		calls := b.CallsTo("faketest.square")
		is.Equal(len(calls), 1)
		is.True(!calls[0].Ran)
		is.Equal(calls[0].Err, ref.Err())
		is.Equal(calls[0].Object, backend.ObjectID(0))
	})

	t.Run("cancelled context", func(t *testing.T) {
		is := is.New(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		is.Equal(square.Remote(cctx, c, 1).Err(), context.Canceled)
		is.Equal(counterClass.Remote(cctx, c, 1).Err(), context.Canceled)
		_, err := ray.NewPlacementGroup(cctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.Equal(err, context.Canceled)
		is.Equal(ray.Put(cctx, c, 1).Err(), context.Canceled)
	})
}

func TestClose(t *testing.T) {
	ctx := context.Background()

	t.Run("every call fails with ErrClosed", func(t *testing.T) {
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		put := ray.Put(ctx, c, 1)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		calls := map[string]func() error{
			"SubmitTask": func() error {
				_, err := b.SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.square"})
				return err
			},
			"Put": func() error { _, err := b.Put(ctx, backend.Value{Data: []byte("1")}); return err },
			"Get": func() error { _, err := b.Get(ctx, put.ID()); return err },
			"Wait": func() error {
				_, err := b.Wait(ctx, []backend.ObjectID{put.ID()}, 1)
				return err
			},
			"CreateActor": func() error {
				_, err := b.CreateActor(ctx, &backend.ActorSpec{Class: "faketest.counter"})
				return err
			},
			"CallActor": func() error {
				_, err := b.CallActor(ctx, &backend.CallSpec{Actor: h.ID(), Class: "faketest.counter", Method: "incr"})
				return err
			},
			"ActorReady": func() error { return b.ActorReady(ctx, h.ID()) },
			"KillActor":  func() error { return b.KillActor(ctx, h.ID()) },
			"NamedActor": func() error { _, _, err := b.NamedActor(ctx, "x"); return err },
			"CreatePlacementGroup": func() error {
				_, err := b.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Bundles: []backend.Bundle{{Resources: backend.Resources{backend.CPU: 1}}}})
				return err
			},
			"PlacementGroupReady":  func() error { return b.PlacementGroupReady(ctx, pg.ID()) },
			"RemovePlacementGroup": func() error { return b.RemovePlacementGroup(ctx, pg.ID()) },
			"Snapshot":             func() error { _, err := b.Snapshot(ctx); return err },
			"Start":                func() error { return b.Start(ctx, ray.NewExecutor(ray.JSON)) },
		}
		for name, call := range calls {
			t.Run(name, func(t *testing.T) {
				is := is.New(t)
				err := call()
				is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
				is.True(errors.Is(err, ray.ErrClosed))
			})
		}
		t.Run("idempotent, log still readable", func(t *testing.T) {
			is := is.New(t)
			b.Free(put.ID()) // no panic
			is.NoErr(b.Close())
			is.NoErr(c.Close())
			is.True(len(b.Calls()) > 0)
		})
	})

	t.Run("work running in another goroutine fails with ErrClosed", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		done := make(chan error)
		go func() {
			_, err := b.SubmitTask(ctx, &backend.TaskSpec{Name: "faketest.block", Arg: backend.Arg{Value: backend.Value{Data: []byte("0")}}})
			done <- err
		}()
		<-started
		is.NoErr(c.Close()) // cancels the task's context
		is.NoErr(<-done)    // the submission itself was accepted
		calls := b.CallsTo("faketest.block")
		is.Equal(len(calls), 1)
		is.True(errors.Is(calls[0].Err, ray.ErrClosed))
	})
}
