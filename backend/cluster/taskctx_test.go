package cluster

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestLazyCancelAfterFunc: functions registered on a task context run once
// when it is cancelled, unless stopped first; the first registration
// (kept outside the map) and later ones behave alike.
func TestLazyCancelAfterFunc(t *testing.T) {
	is := is.New(t)
	var l lazyCancel
	ran := make(chan int, 4)
	stop1 := l.afterFunc(func() { ran <- 1 }, nil)
	stop2 := l.afterFunc(func() { ran <- 2 }, nil)
	stop3 := l.afterFunc(func() { ran <- 3 }, nil)
	is.True(stop1())  // the first one, stopped
	is.True(!stop1()) // once
	is.True(stop3())
	stop4 := l.afterFunc(func() { ran <- 4 }, nil) // takes the free first slot
	l.cancelWith(context.Canceled, nil)
	got := map[int]bool{<-ran: true, <-ran: true}
	is.Equal(got, map[int]bool{2: true, 4: true})
	is.True(!stop2() && !stop4()) // already ran
	l.afterFunc(func() { ran <- 5 }, nil)
	is.Equal(<-ran, 5) // registered after the cancellation: runs at once
	is.Equal(len(ran), 0)
}

// TestGetWaiters: a Get waiting alone (on a pooled channel), two Gets on
// one object (the channel is closed), and a Get whose context ends first
// all return what they should, many times over (pooled channels are
// reused only empty).
func TestGetWaiters(t *testing.T) {
	is := is.New(t)
	rt := &Runtime{}
	newObj := func() *object {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.newObject()
	}
	complete := func(o *object, s string) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.completeLocked(o, backend.Value{Data: []byte(s)}, nil)
	}
	waiting := func(o *object, n int) {
		for {
			rt.mu.Lock()
			ok := o.ch != nil && (n == 1 || !o.chPooled)
			rt.mu.Unlock()
			if ok {
				return
			}
			runtime.Gosched()
		}
	}
	type res struct {
		v   string
		err error
	}
	get := func(ctx context.Context, o *object) <-chan res {
		ch := make(chan res, 1)
		go func() {
			v, err := rt.Get(ctx, o.id)
			ch <- res{string(v.Data), err}
		}()
		return ch
	}
	for i := range 200 {
		want := fmt.Sprint(i)
		o := newObj() // alone
		r := get(context.Background(), o)
		waiting(o, 1)
		complete(o, want)
		is.Equal(<-r, res{want, nil})

		o = newObj() // two waiters
		r1 := get(context.Background(), o)
		waiting(o, 1)
		r2 := get(t.Context(), o)
		waiting(o, 2)
		complete(o, want)
		is.Equal(<-r1, res{want, nil})
		is.Equal(<-r2, res{want, nil})

		o = newObj() // cancelled, then another waits
		ctx, cancel := context.WithCancel(context.Background())
		r = get(ctx, o)
		waiting(o, 1)
		cancel()
		is.Equal((<-r).err, context.Canceled)
		r = get(context.Background(), o)
		waiting(o, 1)
		complete(o, want)
		is.Equal(<-r, res{want, nil})

		v, err := rt.Get(context.Background(), o.id) // done already
		is.NoErr(err)
		is.Equal(string(v.Data), want)
	}
}

// TestLazyCancelStaleStop: the single watch is known by its registration's
// number, so the stop function of a stopped watch does not stop the watch
// registered after it in the same place.
func TestLazyCancelStaleStop(t *testing.T) {
	is := is.New(t)
	var l lazyCancel
	ran := make(chan int, 2)
	stopA := l.afterFunc(func() { ran <- 1 }, nil)
	is.True(stopA())
	stopB := l.afterFunc(func() { ran <- 2 }, nil) // the single watch again
	is.True(!stopA())                              // stale: B stays
	l.cancelWith(context.Canceled, nil)
	is.Equal(<-ran, 2)
	is.True(!stopB()) // already ran
	is.Equal(len(ran), 0)
}

// TestTaskRecordSize: a task's record, with its first attempt's context,
// and an actor call's, with its first run's, fit the 288-byte size class
// (a field most tasks do not use belongs in taskExt).
func TestTaskRecordSize(t *testing.T) {
	is := is.New(t)
	is.True(unsafe.Sizeof(task{}) <= 288)
	is.True(unsafe.Sizeof(call{}) <= 288)
}

// TestCtxCause: a task context reports the error it was cancelled with, of
// the two a context may report.
func TestCtxCause(t *testing.T) {
	is := is.New(t)
	for _, err := range []error{context.Canceled, context.DeadlineExceeded} {
		c := &taskCtx{}
		is.NoErr(c.Err())
		c.cancelWith(err, nil)
		is.Equal(c.Err(), err)
		<-c.Done()
		c.cancelWith(context.Canceled, nil) // the first cause stays
		is.Equal(c.Err(), err)
	}
}
