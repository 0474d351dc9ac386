package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// patience bounds every wait of the suite by default, so a broken backend
// fails a test instead of hanging it (see Harness.Patience).
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
	t.Run("Validation", s.testValidation)
	t.Run("Objects", s.testObjects)
	t.Run("Actors", s.testActors)
	t.Run("PlacementGroups", s.testPlacementGroups)
	t.Run("Scheduling", s.testScheduling)
	t.Run("Faults", s.testFaults)
	t.Run("Snapshot", s.testSnapshot)
	t.Run("TPUSlices", s.testSlices)
	t.Run("TPUSliceFaults", s.testSliceFaults)
	t.Run("TPUSubslices", s.testSubslices)
	t.Run("Cancel", s.testCancel)
	t.Run("Streams", s.testStreams)
	t.Run("JAXProcesses", s.testJAX)
}

type suite struct{ h Harness }

// patience is the harness's Patience, or the default.
func (s *suite) patience() time.Duration {
	if s.h.Patience > 0 {
		return s.h.Patience
	}
	return patience
}

func (s *suite) need(t *testing.T, ok bool, what string) {
	t.Helper()
	if !ok {
		t.Skipf("backend lacks capability %s", what)
	}
}

func (s *suite) cluster(t *testing.T, nodes []Node) *ray.Cluster {
	t.Helper()
	c, _ := s.clusterOf(t, nodes)
	return c
}

// clusterOf is cluster, also returning the backend it runs on.
func (s *suite) clusterOf(t *testing.T, nodes []Node) (*ray.Cluster, backend.Backend) {
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
	return c, b
}

// ctxT is a test's context: it ends after the harness's Patience.
func (s *suite) ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.patience())
	t.Cleanup(cancel)
	return ctx
}

// waitChan waits for ch to close for up to the harness's Patience, and
// fails the test after that.
func (s *suite) waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	if !s.waited(ch) {
		t.Fatalf("timed out after %v waiting for %s", s.patience(), what)
	}
}

// waited reports whether ch closed within the harness's Patience.
func (s *suite) waited(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(s.patience()):
		return false
	}
}

func (s *suite) testTasks(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		v, err := echo.Remote(ctx, c, "hello").Get(ctx)
		is.NoErr(err)
		is.Equal(v, "hello")
	})
	t.Run("ManyTasks", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		v, err := structTask.Remote(ctx, c, point{X: 1, Y: 2, Tags: []string{"a"}}).Get(ctx)
		is.NoErr(err)
		is.Equal(v.X, 2)
		is.Equal(v.Y, 1)
		is.Equal(v.Tags, []string{"a", "swapped"})
	})
	t.Run("RetryOnError", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		v, err := failUntil.Remote(ctx, c, 2, ray.Retries(2), ray.RetryOnError(true)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2) // succeeded on attempt 2
		_, err = failUntil.Remote(ctx, c, 2, ray.Retries(1), ray.RetryOnError(true)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := fail.Remote(ctx, c, "bad input 42").Get(ctx)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := boom.Remote(ctx, c, "kaboom").Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		bad := fail.Remote(ctx, c, "upstream")
		_, err := add1.RemoteRef(ctx, c, bad).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.True(strings.Contains(err.Error(), "upstream"))
	})
	t.Run("UnencodableValue", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := anyOut.Remote(ctx, c, 1).Get(ctx)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		ref := ray.Put(ctx, c, func() {})
		is.Equal(ray.CodeOf(ref.Err()), ray.InvalidArgument)
	})
	t.Run("UnregisteredName", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.LookupTask[int, int]("backendtest.nope")
		is.Equal(ray.CodeOf(err), ray.NotFound)
		is.True(strings.Contains(err.Error(), "backendtest.nope"))
		_, err = ray.LookupTask[string, int]("backendtest.add1")
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		tk, err := ray.LookupTask[int, int]("backendtest.add1")
		is.NoErr(err)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		v, err := tk.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2)
	})
	t.Run("NilCluster", func(t *testing.T) {
		is := is.New(t)
		ctx := s.ctxT(t)
		_, err := add1.Remote(ctx, nil, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		_, err = ray.NewCluster(ctx, nil, nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("ClosedCluster", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		ref := add1.Remote(ctx, c, 1)
		_, err := ref.Get(ctx)
		is.NoErr(err)
		is.NoErr(c.Close())
		is.NoErr(c.Close()) // idempotent
		_, err = ref.Get(ctx)
		is.True(errors.Is(err, ray.ErrClosed))
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
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
		is.Equal(ray.CodeOf(err), ray.Canceled)
	})
	t.Run("NegativeResources", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.Resources{ray.CPU: -1}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "CPU"))
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: -2}}}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("BadSelector", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "in(a,"}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("BadPlacementGroup", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: 42, Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "STRICT_SPREAD")) // lists the valid strategies
	})
}

func (s *suite) testObjects(t *testing.T) {
	t.Run("PutGet", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		ref := ray.Put(ctx, c, 1)
		ref.Release()
		ref.Release()
		_, err := ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	})
	t.Run("Wait", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		refs := []ray.ObjectRef[int]{add1.Remote(ctx, c, 1), add1.Remote(ctx, c, 2), add1.Remote(ctx, c, 3)}
		ready, notReady, err := ray.Wait(ctx, refs, 3)
		is.NoErr(err)
		is.Equal(len(ready), 3)
		is.Equal(len(notReady), 0)
	})
	t.Run("WaitTimeout", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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

// testCancel: ObjectRef.Cancel stops a running task (its context ends) and
// removes a queued one; both Gets fail with Canceled and the resources
// come back; a finished task keeps its result; a Put value cannot be
// cancelled. The same for actor calls; Force on a task that ignores its
// context.
func (s *suite) testCancel(t *testing.T) {
	s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
	is := is.New(t)
	c, ctx := s.cluster(t, []Node{{Name: "one", Resources: backend.Resources{backend.CPU: 1}}}), s.ctxT(t)
	if _, ok := c.Backend().(backend.TaskCanceler); !ok {
		t.Skipf("backend %T does not implement backend.TaskCanceler", c.Backend())
	}
	runningGate, running := newGate(1)
	defer running.release()
	ref := block.Remote(ctx, c, runningGate, ray.Resources{ray.CPU: 1})
	select {
	case <-running.arrivedCh:
	case <-ctx.Done():
		t.Fatal("the task did not start")
	}
	queuedGate, queued := newGate(1)
	defer queued.release()
	waiting := block.Remote(ctx, c, queuedGate, ray.Resources{ray.CPU: 1}) // no CPU left: queued

	is.NoErr(waiting.Cancel(ctx))
	_, err := waiting.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Canceled)
	is.Equal(queued.count(), 0) // it never ran

	is.NoErr(ref.Cancel(ctx))
	_, err = ref.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Canceled)
	select {
	case <-running.cancelCh: // its context ended
	case <-ctx.Done():
		t.Fatal("the running task's context was not cancelled")
	}

	// The CPU is free again; a finished task keeps its result.
	done := echo.Remote(ctx, c, "after", ray.Resources{ray.CPU: 1})
	v, err := done.Get(ctx)
	is.NoErr(err)
	is.Equal(v, "after")
	is.NoErr(done.Cancel(ctx))
	v, err = done.Get(ctx)
	is.NoErr(err)
	is.Equal(v, "after")

	put := ray.Put(ctx, c, 1)
	is.Equal(ray.CodeOf(put.Cancel(ctx)), ray.InvalidArgument)

	t.Run("ActorCalls", func(t *testing.T) {
		// A running call's context ends, a queued call never runs, both
		// fail with Canceled, and the actor goes on; Force is refused.
		is := is.New(t)
		h := counterClass.Remote(ctx, c, 1)
		name, g := newGate(1)
		defer g.release()
		running := counterBlock.Remote(ctx, h, name)
		s.waitChan(t, g.arrivedCh, "running call")
		queued := counterAdd.Remote(ctx, h, 100)
		is.Equal(ray.CodeOf(running.Cancel(ctx, ray.Force())), ray.InvalidArgument) // it would end the actor
		is.NoErr(queued.Cancel(ctx))
		is.NoErr(running.Cancel(ctx))
		_, err := running.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Canceled)
		_, err = queued.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Canceled)
		s.waitChan(t, g.cancelCh, "the running call's context to be cancelled")
		v, err := counterAdd.Remote(ctx, h, 10).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 11)              // the cancelled add of 100 never ran
		is.NoErr(queued.Cancel(ctx)) // cancelling again does nothing
	})
	t.Run("Force", func(t *testing.T) {
		// A task that ignores its context: with Force its Get fails with
		// Canceled at once (its worker process, where there is one, ends),
		// and the cluster goes on running work on that node.
		is := is.New(t)
		name, g := newGate(1)
		defer g.release()
		ref := stubborn.Remote(ctx, c, name, ray.Resources{ray.CPU: 1})
		s.waitChan(t, g.arrivedCh, "stubborn task")
		is.NoErr(ref.Cancel(ctx, ray.Force()))
		_, err := ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Canceled)
		v, err := echo.Remote(ctx, c, "next", ray.Resources{ray.CPU: 1}, ray.Retries(3)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, "next")
	})
}

func timeout(t *testing.T, ctx context.Context, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(ctx, d)
	t.Cleanup(cancel)
	return ctx
}
