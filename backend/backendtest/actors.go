package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

func (s *suite) testActors(t *testing.T) {
	t.Run("SequentialState", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		v, err := counterAdd.RemoteRef(ctx, h, add1.Remote(ctx, c, 4)).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 5)
	})
	t.Run("MaxConcurrency", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0, ray.MaxConcurrency(4))
		name, g := newGate(4)
		var refs []ray.ObjectRef[string]
		for range 4 {
			refs = append(refs, counterBlock.Remote(ctx, h, name))
		}
		s.waitChan(t, g.arrivedCh, "4 concurrent calls") // all four run at once
		g.release()
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(vals, []string{"opened", "opened", "opened", "opened"})
	})
	t.Run("Sequential", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		name, g := newGate(1)
		first := counterBlock.Remote(ctx, h, name)
		second := counterAdd.Remote(ctx, h, 1)
		s.waitChan(t, g.arrivedCh, "first call")
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, -1)
		err := h.Ready(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.True(strings.Contains(err.Error(), "negative start -1"))
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
	})
	t.Run("MethodPanic", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		_, err := counterPanic.Remote(ctx, h, "method boom").Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
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
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		is.NoErr(h.Ready(ctx))
		is.NoErr(h.Kill(ctx))
		is.NoErr(h.Kill(ctx)) // killing a dead actor is fine
		_, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.True(errors.Is(err, ray.ErrActorDied))
		// The error names the class and the method called.
		is.True(strings.Contains(err.Error(), "backendtest.counter"))
		is.True(strings.Contains(err.Error(), "call add"))
		t.Log(err)
	})
	t.Run("KillWithQueuedCalls", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 1)
		name, g := newGate(1)
		defer g.release()
		running := counterBlock.Remote(ctx, h, name)
		queued := counterAdd.Remote(ctx, h, 1)
		s.waitChan(t, g.arrivedCh, "running call")
		is.NoErr(h.Kill(ctx))
		_, err := running.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		_, err = queued.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		s.waitChan(t, g.cancelCh, "the running call's context to be cancelled")
	})
	t.Run("Named", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 3, ray.Name("the-counter"))
		is.NoErr(h.Ready(ctx))
		h2, err := ray.GetActor(ctx, c, counterClass, "the-counter")
		is.NoErr(err)
		v, err := counterAdd.Remote(ctx, h2, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 4)
		dup := counterClass.Remote(ctx, c, 0, ray.Name("the-counter"))
		is.Equal(ray.CodeOf(dup.Err()), ray.AlreadyExists)
		_, err = ray.GetActor(ctx, c, counterClass, "nobody")
		is.Equal(ray.CodeOf(err), ray.NotFound)
		_, err = ray.GetActor(ctx, c, otherCounterClass, "the-counter")
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("WrongClass", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		// otherCounter shares counter's Go type, so the compiler cannot
		// tell them apart; the backend must.
		h := otherCounterClass.Remote(ctx, c, 0)
		_, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.NotFound)
		is.True(strings.Contains(err.Error(), "backendtest.otherCounter"))
	})
	t.Run("RuntimeContext", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0)
		w, err := counterWhere.Remote(ctx, h, "X").Get(ctx)
		is.NoErr(err)
		is.True(w.Node != "")
		is.Equal(w.Task, "backendtest.counter.where")
	})
}
