package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// patience bounds every wait of the suite, so a broken backend fails a test
// instead of hanging it.
const patience = 20 * time.Second

// RunConformanceTests runs the suite against the backend h builds.
func RunConformanceTests(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("backendtest: Harness.New is nil")
	}
	s := &suite{h: h}
	useGateServer(t) // blocking tasks in other processes reach their gates over loopback
	t.Run("Tasks", s.testTasks)
	t.Run("Errors", s.testErrors)
	t.Run("Objects", s.testObjects)
	t.Run("Actors", s.testActors)
	t.Run("PlacementGroups", s.testPlacementGroups)
	t.Run("Scheduling", s.testScheduling)
	t.Run("Faults", s.testFaults)
	t.Run("TPUSlices", s.testSlices)
}

type suite struct{ h Harness }

func (s *suite) need(t *testing.T, ok bool, what string) {
	t.Helper()
	if !ok {
		t.Skipf("backend lacks capability %s", what)
	}
}

func (s *suite) cluster(t *testing.T, nodes []Node) *ray.Cluster {
	t.Helper()
	if nodes == nil {
		nodes = DefaultNodes()
	}
	b := s.h.New(t, nodes)
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatalf("ray.NewCluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatalf("timed out after %v waiting for %s", patience, what)
	}
}

func (s *suite) testTasks(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		v, err := echo.Remote(ctx, c, "hello").Get(ctx)
		is.NoErr(err)
		is.Equal(v, "hello")
	})
	t.Run("ManyTasks", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		var refs []ray.ObjectRef[int]
		for i := range 200 {
			refs = append(refs, add1.Remote(ctx, c, i))
		}
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		for i, v := range vals {
			is.Equal(v, i+1)
		}
	})
	t.Run("Chain", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		ref := add1.Remote(ctx, c, 0)
		for range 20 {
			ref = add1.RemoteRef(ctx, c, ref)
		}
		v, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 21)
	})
	t.Run("StructThroughCodec", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		v, err := structTask.Remote(ctx, c, point{X: 1, Y: 2, Tags: []string{"a"}}).Get(ctx)
		is.NoErr(err)
		is.Equal(v.X, 2)
		is.Equal(v.Y, 1)
		is.Equal(v.Tags, []string{"a", "swapped"})
	})
	t.Run("RetryOnError", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		v, err := failUntil.Remote(ctx, c, 2, ray.Retries(2), ray.RetryOnError(true)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2) // succeeded on attempt 2
		_, err = failUntil.Remote(ctx, c, 2, ray.Retries(1), ray.RetryOnError(true)).Get(ctx)
		is.Equal(ray.Code(err), ray.TaskFailed)
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.Equal(te.Attempt, 1)
		// Without RetryOnError a user error is not retried.
		_, err = failUntil.Remote(ctx, c, 1, ray.Retries(3)).Get(ctx)
		is.True(errors.As(err, &te))
		is.Equal(te.Attempt, 0)
	})
	t.Run("RuntimeContext", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		w, err := whereAmI.Remote(ctx, c, "NOPE").Get(ctx)
		is.NoErr(err)
		is.True(w.Node != "")
		is.Equal(w.Task, "backendtest.where")
		is.Equal(w.Bundle, -1)
		is.Equal(w.Attempt, 0)
		is.Equal(w.CPU, 1.0) // tasks default to one CPU
		_, ok := ray.Runtime(ctx)
		is.True(!ok) // no runtime context outside tasks
	})
}

func (s *suite) testErrors(t *testing.T) {
	t.Run("UserError", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := fail.Remote(ctx, c, "bad input 42").Get(ctx)
		is.True(err != nil)
		is.Equal(ray.Code(err), ray.TaskFailed)
		is.True(errors.Is(err, ray.ErrTaskFailed))
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.Equal(te.Task, "backendtest.fail")
		is.Equal(te.Message, "bad input 42")
		is.True(!te.Panicked)
		is.True(strings.Contains(err.Error(), "bad input 42"))
	})
	t.Run("Panic", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := boom.Remote(ctx, c, "kaboom").Get(ctx)
		is.Equal(ray.Code(err), ray.TaskFailed)
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.True(te.Panicked)
		is.Equal(te.Message, "kaboom")
		is.True(strings.Contains(te.Stack, "backendtest")) // the stack names the panicking code
		// The cluster still works after a panic.
		v, err := add1.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2)
	})
	t.Run("FailedDependency", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		bad := fail.Remote(ctx, c, "upstream")
		_, err := add1.RemoteRef(ctx, c, bad).Get(ctx)
		is.Equal(ray.Code(err), ray.TaskFailed)
		is.True(strings.Contains(err.Error(), "upstream"))
	})
	t.Run("UnencodableValue", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := chanOut.Remote(ctx, c, 1).Get(ctx)
		is.True(err != nil)
		is.Equal(ray.Code(err), ray.InvalidArgument)
		ref := ray.Put(ctx, c, func() {})
		is.Equal(ray.Code(ref.Err()), ray.InvalidArgument)
	})
	t.Run("UnregisteredName", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.LookupTask[int, int]("backendtest.nope")
		is.Equal(ray.Code(err), ray.NotFound)
		is.True(strings.Contains(err.Error(), "backendtest.nope"))
		_, err = ray.LookupTask[string, int]("backendtest.add1")
		is.Equal(ray.Code(err), ray.InvalidArgument)
		tk, err := ray.LookupTask[int, int]("backendtest.add1")
		is.NoErr(err)
		c, ctx := s.cluster(t, nil), ctxT(t)
		v, err := tk.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2)
	})
	t.Run("NilCluster", func(t *testing.T) {
		is := is.New(t)
		ctx := ctxT(t)
		_, err := add1.Remote(ctx, nil, 1).Get(ctx)
		is.Equal(ray.Code(err), ray.InvalidArgument)
		_, err = ray.NewCluster(ctx, nil, nil)
		is.Equal(ray.Code(err), ray.InvalidArgument)
	})
	t.Run("ClosedCluster", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		ref := add1.Remote(ctx, c, 1)
		_, err := ref.Get(ctx)
		is.NoErr(err)
		is.NoErr(c.Close())
		is.NoErr(c.Close()) // idempotent
		_, err = ref.Get(ctx)
		is.True(errors.Is(err, ray.ErrClosed))
		is.Equal(ray.Code(err), ray.FailedPrecondition)
		_, err = add1.Remote(ctx, c, 1).Get(ctx)
		is.True(errors.Is(err, ray.ErrClosed))
	})
	t.Run("CancelledContext", func(t *testing.T) {
		is := is.New(t)
		c := s.cluster(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := add1.Remote(ctx, c, 1).Get(context.Background())
		is.Equal(err, context.Canceled) // returned as is, not wrapped
		is.Equal(ray.Code(err), ray.Canceled)
	})
	t.Run("NegativeResources", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.Resources{ray.CPU: -1}).Get(ctx)
		is.Equal(ray.Code(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "CPU"))
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: -2}}}})
		is.Equal(ray.Code(err), ray.InvalidArgument)
	})
	t.Run("BadSelector", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "in(a,"}).Get(ctx)
		is.Equal(ray.Code(err), ray.InvalidArgument)
	})
	t.Run("BadPlacementGroup", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{})
		is.Equal(ray.Code(err), ray.InvalidArgument)
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: 42, Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.Equal(ray.Code(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "STRICT_SPREAD")) // lists the valid strategies
	})
}

func (s *suite) testObjects(t *testing.T) {
	t.Run("PutGet", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		ref := ray.Put(ctx, c, point{X: 7})
		v, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(v.X, 7)
		v2, err := add1.RemoteRef(ctx, c, ray.Put(ctx, c, 41)).Get(ctx)
		is.NoErr(err)
		is.Equal(v2, 42)
	})
	t.Run("Release", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		ref := ray.Put(ctx, c, 1)
		ref.Release()
		ref.Release()
		_, err := ref.Get(ctx)
		is.Equal(ray.Code(err), ray.FailedPrecondition)
	})
	t.Run("Wait", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		refs := []ray.ObjectRef[int]{add1.Remote(ctx, c, 1), add1.Remote(ctx, c, 2), add1.Remote(ctx, c, 3)}
		ready, notReady, err := ray.Wait(ctx, refs, 3)
		is.NoErr(err)
		is.Equal(len(ready), 3)
		is.Equal(len(notReady), 0)
	})
	t.Run("WaitTimeout", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		name, g := newGate(1)
		defer g.release()
		blocked := block.Remote(ctx, c, name)
		done := echo.Remote(ctx, c, "x")
		_, err := done.Get(ctx)
		is.NoErr(err)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		ready, notReady, err := ray.Wait(wctx, []ray.Ref{blocked, done}, 2)
		is.Equal(err, context.DeadlineExceeded)
		is.Equal(len(ready), 1)
		is.Equal(ready[0].ID(), done.ID())
		is.Equal(notReady[0].ID(), blocked.ID())
		g.release()
		v, err := blocked.Get(ctx)
		is.NoErr(err)
		is.Equal(v, "opened")
	})
	t.Run("GetContextDeadline", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		name, g := newGate(1)
		defer g.release()
		ref := block.Remote(ctx, c, name)
		gctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := ref.Get(gctx)
		is.Equal(err, context.DeadlineExceeded)
		g.release()
		v, err := ref.Get(ctx) // the work outlives a Get's context
		is.NoErr(err)
		is.Equal(v, "opened")
	})
}

func (s *suite) testActors(t *testing.T) {
	t.Run("SequentialState", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 10)
		is.NoErr(h.Ready(ctx))
		var refs []ray.ObjectRef[[]string]
		for i := range 50 {
			refs = append(refs, counterLog.Remote(ctx, h, fmt.Sprint(i)))
		}
		logs, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		last := logs[len(logs)-1]
		is.Equal(len(last), 50)
		for i, s := range last {
			is.Equal(s, fmt.Sprint(i)) // calls ran in submission order
		}
		v, err := counterAdd.Remote(ctx, h, 5).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 15)
	})
	t.Run("CallWithRef", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		v, err := counterAdd.RemoteRef(ctx, h, add1.Remote(ctx, c, 4)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 5)
	})
	t.Run("MaxConcurrency", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 0, ray.MaxConcurrency(4))
		name, g := newGate(4)
		var refs []ray.ObjectRef[string]
		for range 4 {
			refs = append(refs, counterBlock.Remote(ctx, h, name))
		}
		waitChan(t, g.arrivedCh, "4 concurrent calls") // all four run at once
		g.release()
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(vals, []string{"opened", "opened", "opened", "opened"})
	})
	t.Run("Sequential", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		name, g := newGate(1)
		first := counterBlock.Remote(ctx, h, name)
		second := counterAdd.Remote(ctx, h, 1)
		waitChan(t, g.arrivedCh, "first call")
		_, _, err := ray.Wait(timeout(t, ctx, 30*time.Millisecond), []ray.Ref{second}, 1)
		is.Equal(err, context.DeadlineExceeded) // the second call waits for the first
		g.release()
		_, err = first.Get(ctx)
		is.NoErr(err)
		v, err := second.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
	})
	t.Run("ConstructorError", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, -1)
		err := h.Ready(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
		is.True(strings.Contains(err.Error(), "negative start -1"))
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
	})
	t.Run("MethodPanic", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		_, err := counterPanic.Remote(ctx, h, "method boom").Get(ctx)
		is.Equal(ray.Code(err), ray.TaskFailed)
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.True(te.Panicked)
		is.Equal(te.Task, "backendtest.counter.panic")
		v, err := counterAdd.Remote(ctx, h, 1).Get(ctx) // the actor survives
		is.NoErr(err)
		is.Equal(v, 2)
	})
	t.Run("Kill", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		is.NoErr(h.Ready(ctx))
		is.NoErr(h.Kill(ctx))
		is.NoErr(h.Kill(ctx)) // killing a dead actor is fine
		_, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
		is.True(errors.Is(err, ray.ErrActorDied))
	})
	t.Run("KillWithQueuedCalls", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		name, g := newGate(1)
		defer g.release()
		running := counterBlock.Remote(ctx, h, name)
		queued := counterAdd.Remote(ctx, h, 1)
		waitChan(t, g.arrivedCh, "running call")
		is.NoErr(h.Kill(ctx))
		_, err := running.Get(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
		_, err = queued.Get(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
		waitChan(t, g.cancelCh, "the running call's context to be cancelled")
	})
	t.Run("Named", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 3, ray.Name("the-counter"))
		is.NoErr(h.Ready(ctx))
		h2, err := ray.GetActor(ctx, c, counterClass, "the-counter")
		is.NoErr(err)
		v, err := counterAdd.Remote(ctx, h2, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 4)
		dup := counterClass.Remote(ctx, c, 0, ray.Name("the-counter"))
		is.Equal(ray.Code(dup.Err()), ray.AlreadyExists)
		_, err = ray.GetActor(ctx, c, counterClass, "nobody")
		is.Equal(ray.Code(err), ray.NotFound)
		_, err = ray.GetActor(ctx, c, otherCounterClass, "the-counter")
		is.Equal(ray.Code(err), ray.InvalidArgument)
	})
	t.Run("WrongClass", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		// otherCounter shares counter's Go type, so the compiler cannot
		// tell them apart; the backend must.
		h := otherCounterClass.Remote(ctx, c, 0)
		_, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.Code(err), ray.NotFound)
		is.True(strings.Contains(err.Error(), "backendtest.otherCounter"))
	})
	t.Run("RuntimeContext", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		w, err := counterWhere.Remote(ctx, h, "X").Get(ctx)
		is.NoErr(err)
		is.True(w.Node != "")
		is.Equal(w.Task, "backendtest.counter.where")
	})
}

func timeout(t *testing.T, ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) testPlacementGroups(t *testing.T) {
	t.Run("ReadyAndBundles", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{
			Name: "pg", Strategy: ray.Pack,
			Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}, Env: map[string]string{"WHO": "zero"}}, {Resources: ray.Resources{ray.CPU: 1}, Env: map[string]string{"WHO": "one"}}},
		})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		is.Equal(pg.NumBundles(), 2)
		for i, want := range []string{"zero", "one"} {
			w, err := whereAmI.Remote(ctx, c, "WHO", ray.InBundle(pg, i)).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Bundle, i)
			is.Equal(w.Env, want)
		}
		h := counterClass.Remote(ctx, c, 0, ray.InBundle(pg, 1))
		w, err := counterWhere.Remote(ctx, h, "WHO").Get(ctx)
		is.NoErr(err)
		is.Equal(w.Bundle, 1)
		is.Equal(w.Env, "one")
		is.NoErr(pg.Remove(ctx))
		is.NoErr(pg.Remove(ctx)) // idempotent
		_, err = add1.Remote(ctx, c, 1, ray.InBundle(pg, 0)).Get(ctx)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx) // actors in it were killed
		is.Equal(ray.Code(err), ray.ActorDied)
	})
	t.Run("BadBundleIndex", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		defer pg.Remove(ctx)
		_, err = add1.Remote(ctx, c, 1, ray.InBundle(pg, 3)).Get(ctx)
		is.Equal(ray.Code(err), ray.InvalidArgument)
	})
	t.Run("RemoveRunning", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		name, g := newGate(1)
		defer g.release()
		running := block.Remote(ctx, c, name, ray.InBundle(pg, 0))
		waitChan(t, g.arrivedCh, "task in bundle")
		is.NoErr(pg.Remove(ctx))
		_, err = running.Get(ctx)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		waitChan(t, g.cancelCh, "the running task's context to be cancelled")
	})
	t.Run("Strategies", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		for _, tc := range []struct {
			strategy ray.Strategy
			bundles  int
			cpu      float64
			distinct int // -1: don't care
			feasible bool
		}{
			{ray.StrictPack, 3, 1, 1, true},
			{ray.StrictPack, 2, 3, -1, false}, // 6 CPUs on one 4-CPU node
			{ray.StrictSpread, 3, 1, 3, true},
			{ray.StrictSpread, 4, 1, -1, false}, // only 3 nodes
			{ray.Pack, 3, 1, 1, true},
			{ray.Pack, 3, 3, 3, true}, // cannot share a node
			{ray.Spread, 3, 1, 3, true},
			{ray.Spread, 6, 1, 3, true},
		} {
			t.Run(fmt.Sprintf("%s-%dx%v", tc.strategy, tc.bundles, tc.cpu), func(t *testing.T) {
				is := is.New(t)
				c, ctx := s.cluster(t, nil), ctxT(t)
				bundles := make([]ray.Bundle, tc.bundles)
				for i := range bundles {
					bundles[i] = ray.Bundle{Resources: ray.Resources{ray.CPU: tc.cpu}}
				}
				pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: tc.strategy, Bundles: bundles})
				if !tc.feasible {
					is.Equal(ray.Code(err), ray.Infeasible)
					is.True(strings.Contains(err.Error(), tc.strategy.String()))
					return
				}
				is.NoErr(err)
				is.NoErr(pg.Ready(ctx))
				nodes := map[string]bool{}
				for i := range tc.bundles {
					w, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, i), ray.Resources{ray.CPU: tc.cpu}).Get(ctx)
					is.NoErr(err)
					nodes[w.Node] = true
				}
				if tc.distinct >= 0 {
					is.Equal(len(nodes), tc.distinct)
				}
				is.NoErr(pg.Remove(ctx))
			})
		}
	})
	t.Run("GangIsAtomic", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Snapshot, "ResourceAccounting and Snapshot")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		// Fill node-0 and node-1 with a group, so a STRICT_SPREAD group of
		// three 2-CPU bundles cannot place: it must take nothing.
		hog, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 3}, LabelSelector: ray.NodeSelector{"zone": "a"}},
			{Resources: ray.Resources{ray.CPU: 3}, LabelSelector: ray.NodeSelector{"zone": "b"}},
		}})
		is.NoErr(err)
		is.NoErr(hog.Ready(ctx))
		gang, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 2}}, {Resources: ray.Resources{ray.CPU: 2}}, {Resources: ray.Resources{ray.CPU: 2}},
		}})
		is.NoErr(err)
		is.Equal(gang.Ready(timeout(t, ctx, 30*time.Millisecond)), context.DeadlineExceeded)
		st, err := c.Snapshot(ctx)
		is.NoErr(err)
		for _, n := range st.Nodes {
			if n.Name == "node-2" {
				is.Equal(n.Free[ray.CPU], 4.0) // nothing partially reserved
			}
		}
		is.NoErr(hog.Remove(ctx))
		is.NoErr(gang.Ready(ctx))
		is.NoErr(gang.Remove(ctx))
	})
	t.Run("InfeasibleBundle", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 64}}}})
		is.Equal(ray.Code(err), ray.Infeasible)
		is.True(errors.Is(err, ray.ErrInfeasible))
		is.True(strings.Contains(err.Error(), "bundle 1"))
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}, LabelSelector: ray.NodeSelector{"zone": "mars"}}}})
		is.Equal(ray.Code(err), ray.Infeasible)
	})
}

func (s *suite) testScheduling(t *testing.T) {
	t.Run("QueueBeyondCapacity", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 2}}}), ctxT(t)
		name, g := newGate(2)
		var refs []ray.ObjectRef[string]
		for range 4 {
			refs = append(refs, block.Remote(ctx, c, name))
		}
		waitChan(t, g.arrivedCh, "two tasks to start")
		st, err := c.Snapshot(ctx)
		if err == nil {
			is.Equal(st.Running, 2) // only two fit
			is.Equal(st.Queued, 2)
		}
		g.release()
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(len(vals), 4)
		is.Equal(g.count(), 4)
	})
	t.Run("Infeasible", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.Resources{ray.CPU: 5}).Get(ctx)
		is.Equal(ray.Code(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "CPU: 5"))
		_, err = add1.Remote(ctx, c, 1, ray.Resources{"unicorn": 1}).Get(ctx)
		is.Equal(ray.Code(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "unicorn"))
		h := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 8})
		is.Equal(ray.Code(h.Err()), ray.Infeasible)
	})
	t.Run("CustomResource", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		w, err := whereAmI.Remote(ctx, c, "", ray.Resources{"special": 1}).Get(ctx)
		is.NoErr(err)
		is.Equal(w.Node, "node-2")
	})
	t.Run("NodeSelector", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Labels, "Labels")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		for range 5 {
			w, err := whereAmI.Remote(ctx, c, "", ray.NodeSelector{"zone": "b"}).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Node, "node-1")
			is.Equal(w.Labels["zone"], "b")
			w, err = whereAmI.Remote(ctx, c, "", ray.NodeSelector{"zone": "!in(a,b)"}).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Node, "node-2")
		}
		_, err := add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "mars"}).Get(ctx)
		is.Equal(ray.Code(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "zone=mars"))
	})
	t.Run("DependencyHoldsNoResources", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 1}}}), ctxT(t)
		// The input is a put value that a gate-blocked... instead: a
		// dependent waiting on an unfinished task must not hold the only
		// CPU, or its input could never run.
		name, g := newGate(1)
		defer g.release()
		first := block.Remote(ctx, c, name, ray.Resources{ray.CPU: 0})
		waiting := echo.RemoteRef(ctx, c, first)
		other := add1.Remote(ctx, c, 1) // must run while `waiting` waits
		v, err := other.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2)
		g.release()
		s2, err := waiting.Get(ctx)
		is.NoErr(err)
		is.Equal(s2, "opened")
	})
	t.Run("NoStarvation", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 4}}}), ctxT(t)
		// A stream of 1-CPU tasks keeps the node busy; a 4-CPU task queued
		// behind them must still run while the stream goes on.
		stop := make(chan struct{})
		streamDone := make(chan struct{})
		go func() {
			defer close(streamDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				refs := make([]ray.ObjectRef[int], 8)
				for i := range refs {
					refs[i] = add1.Remote(ctx, c, i)
				}
				if _, err := ray.GetAll(ctx, refs); err != nil {
					return
				}
			}
		}()
		big := add1.Remote(ctx, c, 100, ray.Resources{ray.CPU: 4})
		v, err := big.Get(ctx)
		close(stop)
		<-streamDone
		is.NoErr(err)
		is.Equal(v, 101)
	})
	t.Run("ZeroResources", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 1}}}), ctxT(t)
		name, g := newGate(3)
		var refs []ray.ObjectRef[string]
		for range 3 {
			refs = append(refs, block.Remote(ctx, c, name, ray.Resources{ray.CPU: 0}))
		}
		waitChan(t, g.arrivedCh, "three 0-CPU tasks on a 1-CPU node")
		g.release()
		_, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
	})
}

func (s *suite) testFaults(t *testing.T) {
	s.need(t, s.h.Capabilities.FaultInjection && s.h.Capabilities.Concurrent, "FaultInjection and Concurrent")
	kill := func(t *testing.T, c *ray.Cluster, node string) {
		t.Helper()
		fi, ok := c.Backend().(backend.FaultInjector)
		if !ok {
			t.Fatalf("backend %T declares FaultInjection but does not implement backend.FaultInjector", c.Backend())
		}
		if err := fi.KillNode(context.Background(), node); err != nil {
			t.Fatalf("KillNode(%s): %v", node, err)
		}
	}
	t.Run("TaskRetriedOnNodeDeath", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		name, g := newGate(1)
		defer g.release()
		ref := block.Remote(ctx, c, name, ray.NodeSelector{"zone": "in(a,b)"}, ray.Retries(1))
		waitChan(t, g.arrivedCh, "task start")
		node := runningNode(t, c)
		kill(t, c, node)
		waitChan(t, g.cancelCh, "the lost attempt's context to be cancelled")
		g.release()
		v, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(v, "opened")
	})
	t.Run("TaskUnavailableWithoutRetries", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		name, g := newGate(1)
		defer g.release()
		ref := block.Remote(ctx, c, name, ray.NodeSelector{"zone": "c"}, ray.Retries(0))
		waitChan(t, g.arrivedCh, "task start")
		kill(t, c, "node-2")
		_, err := ref.Get(ctx)
		is.Equal(ray.Code(err), ray.Unavailable)
		is.True(errors.Is(err, ray.ErrUnavailable))
		is.True(strings.Contains(err.Error(), "node-2"))
		// The node is gone: work only it could run is now infeasible.
		_, err = add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "c"}).Get(ctx)
		is.Equal(ray.Code(err), ray.Infeasible)
	})
	t.Run("ActorRestarts", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		h := counterClass.Remote(ctx, c, 0, ray.MaxRestarts(1))
		w, err := counterWhere.Remote(ctx, h, "").Get(ctx)
		is.NoErr(err)
		kill(t, c, w.Node)
		// The restarted actor starts from its constructor again.
		v, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
		w2, err := counterWhere.Remote(ctx, h, "").Get(ctx)
		is.NoErr(err)
		is.True(w2.Node != w.Node)
		kill(t, c, w2.Node) // out of restarts
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.Code(err), ray.ActorDied)
	})
	t.Run("PlacementGroupRescheduled", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		w, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 0)).Get(ctx)
		is.NoErr(err)
		kill(t, c, w.Node)
		is.NoErr(pg.Ready(ctx))
		w2, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 0)).Get(ctx)
		is.NoErr(err)
		is.True(w2.Node != w.Node)
		w3, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 1)).Get(ctx)
		is.NoErr(err)
		is.True(w3.Node != w2.Node) // still strictly spread
	})
}

// runningNode finds the one node running a task, from a snapshot.
func runningNode(t *testing.T, c *ray.Cluster) string {
	t.Helper()
	st, err := c.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var nodes []string
	for _, n := range st.Nodes {
		if n.Running > 0 {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) != 1 {
		t.Fatalf("want one node running a task, have %v", nodes)
	}
	return nodes[0]
}
