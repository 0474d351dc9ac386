package fake_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

func TestActors(t *testing.T) {
	ctx := context.Background()

	t.Run("calls run in order on one instance", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 10)
		is.NoErr(h.Ready(ctx))
		var refs []ray.ObjectRef[int]
		for i := 1; i <= 4; i++ {
			refs = append(refs, incr.Remote(ctx, h, i))
		}
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(vals, []int{11, 13, 16, 20})
		var args []int
		for _, call := range b.CallsOf(fake.KindMethod) {
			is.Equal(call.Name, "faketest.counter.incr")
			is.Equal(call.Actor, h.ID())
			var d int
			is.NoErr(call.DecodeArg(&d))
			args = append(args, d)
		}
		is.Equal(args, []int{1, 2, 3, 4})
		var start int
		is.NoErr(b.CallsTo("faketest.counter")[0].DecodeArg(&start))
		is.Equal(start, 10)
	})

	t.Run("runtime info of a method", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		v, err := whereMethod.Remote(ctx, h, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v, view{Task: "faketest.counter.where", Node: fake.NodeName, Bundle: -1, Actor: uint64(h.ID())})
	})

	t.Run("calls from many goroutines are serialized", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					_, _ = incr.Remote(ctx, h, 1).Get(ctx)
				}
			})
		}
		wg.Wait()
		v, err := incr.Remote(ctx, h, 0).Get(ctx) // -race would flag unserialized calls
		is.NoErr(err)
		is.Equal(v, 80)
	})

	t.Run("failed constructor", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, -1)
		is.NoErr(h.Err()) // the creation was accepted
		err := h.Ready(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.True(strings.Contains(err.Error(), "negative start"))
		_, err2 := incr.Remote(ctx, h, 1).Get(ctx)
		is.True(errors.Is(err2, err))                           // the actor's death,
		is.True(strings.HasPrefix(err2.Error(), "call incr: ")) // as the call's error
		is.Equal(b.CallsTo("faketest.counter")[0].Err, err)
		is.True(!b.CallsTo("faketest.counter.incr")[0].Ran)
	})

	t.Run("kill", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0, ray.Name("k"))
		is.NoErr(h.Kill(ctx))
		is.NoErr(h.Kill(ctx)) // killing a dead actor is not an error
		_, err := incr.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
		is.Equal(ray.CodeOf(h.Ready(ctx)), ray.ActorDied)
		_, err = ray.GetActor(ctx, c, counterClass, "k")
		is.Equal(ray.CodeOf(err), ray.NotFound)
		is.NoErr(counterClass.Remote(ctx, c, 0, ray.Name("k")).Err()) // the name is free again
		s, err := b.Snapshot(ctx)
		is.NoErr(err)
		is.Equal(s.Actors[0].State, "DEAD")
		is.Equal(s.Actors[1].State, "ALIVE")
	})

	t.Run("kill during a call in another goroutine", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		done := make(chan error)
		go func() {
			_, err := blockMethod.Remote(ctx, h, 0).Get(ctx)
			done <- err
		}()
		<-started
		is.NoErr(h.Kill(ctx)) // cancels the call's context
		err := <-done
		is.Equal(ray.CodeOf(err), ray.ActorDied)
	})

	t.Run("named actors", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 5, ray.Name("shared"))
		is.NoErr(h.Err())
		got, err := ray.GetActor(ctx, c, counterClass, "shared")
		is.NoErr(err)
		v, err := incr.Remote(ctx, got, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 6)
		err = counterClass.Remote(ctx, c, 0, ray.Name("shared")).Err()
		is.Equal(ray.CodeOf(err), ray.AlreadyExists)
	})

	t.Run("a method calling its own actor fails instead of hanging", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		selfHandle.Store(h)
		_, err := selfCall.Remote(ctx, h, 0).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unimplemented)
		h2 := counterClass.Remote(ctx, c, 0, ray.MaxConcurrency(2)) // a free slot: fine
		selfHandle.Store(h2)
		v, err := selfCall.Remote(ctx, h2, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
	})

	t.Run("calls that cannot reach the actor", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		_, err := b.CallActor(ctx, &backend.CallSpec{Actor: h.ID(), Class: "faketest.other", Method: "incr"})
		is.Equal(ray.CodeOf(err), ray.NotFound) // wrong class
		_, err = b.CallActor(ctx, &backend.CallSpec{Actor: h.ID(), Class: "faketest.counter", Method: "nope"})
		is.Equal(ray.CodeOf(err), ray.NotFound)
		_, err = b.CallActor(ctx, &backend.CallSpec{Actor: h.ID(), Class: "faketest.counter"})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})

	t.Run("failed input", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		b.SetError("faketest.square", errors.New("bad input"))
		in := square.Remote(ctx, c, 1)
		_, want := in.Get(ctx)
		_, err := incr.RemoteRef(ctx, h, in).Get(ctx)
		is.Equal(err, want)
		is.True(!b.CallsTo("faketest.counter.incr")[0].Ran)
	})
}

func TestActorWaits(t *testing.T) {
	ctx := context.Background()

	t.Run("a call waiting for a busy actor gives up with its context", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		done := make(chan error)
		go func() {
			_, err := blockMethod.Remote(ctx, h, 0).Get(ctx)
			done <- err
		}()
		<-started // the only call slot is taken until the kill below
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		ref := incr.Remote(wctx, h, 1)
		is.Equal(ref.Err(), context.DeadlineExceeded)
		calls := b.CallsTo("faketest.counter.incr")
		is.Equal(len(calls), 1)
		is.Equal(calls[0].Err, context.DeadlineExceeded)
		is.True(!calls[0].Ran)
		is.NoErr(h.Kill(ctx))
		is.Equal(ray.CodeOf(<-done), ray.ActorDied)
	})

	t.Run("a call waiting for a busy actor fails when it dies", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		h := counterClass.Remote(ctx, c, 0)
		blocked, waiting := make(chan error), make(chan error)
		go func() {
			_, err := blockMethod.Remote(ctx, h, 0).Get(ctx)
			blocked <- err
		}()
		<-started
		go func() {
			_, err := incr.Remote(ctx, h, 1).Get(ctx) // waits for the slot, or finds the actor dead
			waiting <- err
		}()
		is.NoErr(h.Kill(ctx))
		is.Equal(ray.CodeOf(<-blocked), ray.ActorDied)
		is.Equal(ray.CodeOf(<-waiting), ray.ActorDied)
	})
}

func TestActorUnderConstruction(t *testing.T) {
	ctx := context.Background()
	is := is.New(t)
	b, c := newCluster(t, nil, nil)
	gate := make(chan struct{})
	slowGate.Store(&gate)
	created := make(chan *ray.ActorHandle[*counter])
	go func() { created <- slowClass.Remote(ctx, c, 0, ray.Name("slow")) }()
	<-started // the constructor runs
	h, err := ray.GetActor(ctx, c, slowClass, "slow")
	is.NoErr(err)
	s, err := b.Snapshot(ctx)
	is.NoErr(err)
	is.Equal(s.Actors[0].State, "PENDING")
	results := make(chan error, 2)
	go func() {
		_, err := slowIncr.Remote(ctx, h, 1).Get(ctx) // waits for the constructor
		results <- err
	}()
	go func() { results <- h.Ready(ctx) }()
	close(gate)
	is.NoErr((<-created).Err())
	is.NoErr(<-results)
	is.NoErr(<-results)
}
