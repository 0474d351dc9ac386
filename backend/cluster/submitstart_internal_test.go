package cluster

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// starterExec is a backend.TaskStarter that keeps what it is asked to
// start, for the test to finish (or refuses, with refuse set), recording
// the goroutine of the last StartTask. enter and release, if set, hold
// StartTask until release closes, once enter is closed.
type starterExec struct {
	claimExec
	refuse         bool
	enter, release chan struct{}
	on             atomic.Int64
	mu             sync.Mutex
	started        []backend.TaskDone
}

func (x *starterExec) StartTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo, done backend.TaskDone) bool {
	x.on.Store(goid())
	if x.enter != nil {
		close(x.enter)
		<-x.release
	}
	if x.refuse {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.started = append(x.started, done)
	return true
}

// finishAll delivers v to every task started, as a worker connection's
// reader would, and reports how many there were.
func (x *starterExec) finishAll(v backend.Value) int {
	x.mu.Lock()
	started := x.started
	x.started = nil
	x.mu.Unlock()
	for _, d := range started {
		d.TaskDone(v, nil)
	}
	return len(started)
}

// TestSubmitStartsTaskOnCaller: with a TaskStarter, a task that can start
// at once is started by the submitting goroutine before SubmitTaskArg
// returns, not handed to a pool goroutine; its result and counters are
// as for any started task.
func TestSubmitStartsTaskOnCaller(t *testing.T) {
	is := is.New(t)
	x := &starterExec{}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{Value: backend.Value{Data: []byte("in")}})
	is.NoErr(err)
	is.Equal(x.on.Load(), goid()) // started on the submitter
	is.Equal(held.runAll(), 0)    // nothing for the pool
	is.Equal(x.finishAll(backend.Value{Data: []byte("out")}), 1)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "out")
	is.Equal(x.runs.Load(), int32(0)) // never run with RunTask
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 1, Finished: 1})
	rt.mu.Lock()
	is.Equal(rt.running, 0)
	rt.mu.Unlock()
}

// TestSubmitStartRefusedGoesToPool: when the starter cannot start the
// task (its worker is not connected), the task goes to the pool and runs
// there with RunTask, once.
func TestSubmitStartRefusedGoesToPool(t *testing.T) {
	is := is.New(t)
	x := &starterExec{refuse: true}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx, cancel := context.WithCancel(context.Background()) // a Get that waits
	defer cancel()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{Value: backend.Value{Data: []byte("in")}})
	is.NoErr(err)
	is.Equal(x.runs.Load(), int32(0))
	is.Equal(held.runAll(), 1) // handed to the pool
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "in")
	is.Equal(x.runs.Load(), int32(1))
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 1, Finished: 1})
}

// TestCloseWaitsForSubmitStart: Close waits for a start that the
// submitting goroutine is making, as for a pool goroutine's.
func TestCloseWaitsForSubmitStart(t *testing.T) {
	is := is.New(t)
	x := &starterExec{enter: make(chan struct{}), release: make(chan struct{})}
	rt, _ := heldRuntime(t, x)
	submitted := make(chan error, 1)
	go func() {
		_, err := rt.SubmitTaskArg(context.Background(), claimSpec(0), backend.Arg{})
		submitted <- err
	}()
	select {
	case <-x.enter:
	case err := <-submitted:
		t.Fatalf("the submission returned (%v) without starting the task", err)
	}
	closed := make(chan struct{})
	go func() {
		rt.Close()
		close(closed)
	}()
	// Close has marked the runtime closed; give it every chance to
	// return (it must not, while the start has not returned).
	for closing := false; !closing; runtime.Gosched() {
		rt.mu.Lock()
		closing = rt.closed
		rt.mu.Unlock()
	}
	for range 1000 {
		select {
		case <-closed:
			t.Fatal("Close returned while a submitter was starting a task")
		default:
			runtime.Gosched()
		}
	}
	close(x.release)
	<-closed
	is.NoErr(<-submitted)
}

// TestTaskDoneHeldWakesOnFlush: a result delivered held
// (backend.TaskDoneHolder) completes the task at once (a new Get returns
// it), but the Get that was waiting for it is woken by the runtime's
// Flush, which wakes the Gets of every result held since the last one.
func TestTaskDoneHeldWakesOnFlush(t *testing.T) {
	is := is.New(t)
	x := &starterExec{}
	rt, _ := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	var ids []backend.ObjectID
	for range 2 {
		id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
		is.NoErr(err)
		ids = append(ids, id)
	}
	type got struct {
		v   backend.Value
		err error
	}
	waits := make([]chan got, len(ids))
	for i, id := range ids {
		waits[i] = make(chan got, 1)
		go func() {
			v, err := rt.Get(ctx, id)
			waits[i] <- got{v, err}
		}()
	}
	// Both Gets wait: their objects have channels.
	for {
		rt.mu.Lock()
		n := 0
		for _, id := range ids {
			if o := rt.objects.get(id); o != nil && o.ch != nil {
				n++
			}
		}
		rt.mu.Unlock()
		if n == len(ids) {
			break
		}
		runtime.Gosched()
	}
	x.mu.Lock()
	started := x.started
	x.mu.Unlock()
	is.Equal(len(started), 2)
	var f backend.Flusher
	for i, d := range started {
		h, ok := d.(backend.TaskDoneHolder)
		is.True(ok) // the runtime's task contexts can hold
		f = h.TaskDoneHeld(backend.Value{Data: []byte{byte('a' + i)}}, nil)
		is.True(f != nil)
	}
	v, err := rt.Get(ctx, ids[1]) // done already
	is.NoErr(err)
	is.Equal(string(v.Data), "b")
	rt.mu.Lock()
	for _, id := range ids {
		if o := rt.objects.get(id); o != nil && o.ch != nil {
			is.Equal(len(o.ch), 0) // the waiters are not woken yet
		}
	}
	is.Equal(len(rt.heldWakes), 2)
	rt.mu.Unlock()
	f.Flush()
	for i, w := range waits {
		r := <-w
		is.NoErr(r.err)
		is.Equal(string(r.v.Data), string(rune('a'+i)))
	}
	f.Flush() // nothing held: nothing happens
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 2, Finished: 2})
}

// waitAllWaiting waits until the WaitAll of ids (running on another
// goroutine) waits on the channel of ids[want], and returns which of
// ids have a waiter's channel.
func waitAllWaiting(rt *Runtime, ids []backend.ObjectID, want int) []bool {
	for {
		rt.mu.Lock()
		has := make([]bool, len(ids))
		for i, id := range ids {
			o := rt.objects.get(id)
			has[i] = o != nil && o.ch != nil
		}
		rt.mu.Unlock()
		if has[want] {
			return has
		}
		runtime.Gosched()
	}
}

// submitStarted submits n tasks, which x starts, and returns their
// objects and x's started tasks.
func submitStarted(t *testing.T, rt *Runtime, x *starterExec, n int) ([]backend.ObjectID, []backend.TaskDone) {
	t.Helper()
	var ids []backend.ObjectID
	for range n {
		id, err := rt.SubmitTaskArg(context.Background(), claimSpec(0), backend.Arg{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return ids, x.started
}

// TestWaitAllWaitsForTheLast: with a TaskStarter, WaitAll waits on the
// last of its objects that is not done only (the others get no waiter,
// so their results wake nobody), looks again when that one is done, and
// returns once all are done.
func TestWaitAllWaitsForTheLast(t *testing.T) {
	is := is.New(t)
	x := &starterExec{}
	rt, _ := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	ids, started := submitStarted(t, rt, x, 3)
	is.Equal(len(started), 3)
	returned := make(chan struct{})
	go func() {
		rt.WaitAll(ctx, ids)
		close(returned)
	}()
	is.Equal(waitAllWaiting(rt, ids, 2), []bool{false, false, true})
	// The last is done first: WaitAll looks again and waits for the
	// second, the last not done.
	started[2].TaskDone(backend.Value{}, nil)
	is.Equal(waitAllWaiting(rt, ids, 1), []bool{false, true, true})
	started[0].TaskDone(backend.Value{}, nil)
	select {
	case <-returned:
		t.Fatal("WaitAll returned before every object was done")
	default:
	}
	started[1].TaskDone(backend.Value{}, nil)
	<-returned
	for _, id := range ids {
		_, err := rt.Get(ctx, id)
		is.NoErr(err)
	}
}

// TestWaitAllReturnsOnAFailure: WaitAll returns as soon as any object
// fails, done or not the others, and gives back the channel it waited
// on; it returns at once when one of its objects failed already, when
// its context ends, and, without a TaskStarter, at once (a Get in turn
// may run a task itself).
func TestWaitAllReturnsOnAFailure(t *testing.T) {
	is := is.New(t)
	x := &starterExec{}
	rt, _ := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	ids, started := submitStarted(t, rt, x, 3)
	returned := make(chan struct{})
	go func() {
		rt.WaitAll(ctx, ids)
		close(returned)
	}()
	waitAllWaiting(rt, ids, 2)
	started[0].TaskDone(backend.Value{}, backend.Errorf(backend.TaskFailed, "", "boom"))
	<-returned
	rt.mu.Lock()
	o := rt.objects.get(ids[2])
	is.True(o.ch == nil) // the channel went back
	rt.mu.Unlock()
	rt.WaitAll(ctx, ids) // a failed one: at once

	cctx, cancel := context.WithCancel(ctx)
	returned = make(chan struct{})
	go func() {
		rt.WaitAll(cctx, ids[1:])
		close(returned)
	}()
	waitAllWaiting(rt, ids, 2)
	cancel()
	<-returned

	in, _ := heldRuntime(t, &claimExec{})
	defer in.Close()
	a, err := in.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	b, err := in.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	in.WaitAll(ctx, []backend.ObjectID{a, b}) // not run by anyone yet: returns at once
	for _, d := range started[1:] {
		d.TaskDone(backend.Value{}, nil)
	}
}
