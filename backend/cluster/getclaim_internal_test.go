package cluster

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// goid returns the calling goroutine's number, from its stack's header.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseInt(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// claimExec runs tasks with run, counting the runs and recording the
// goroutine of the last.
type claimExec struct {
	echoExec
	runs atomic.Int32
	on   atomic.Int64
	run  func(ctx context.Context, attempt int) (backend.Value, error)
}

func (x *claimExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	x.runs.Add(1)
	x.on.Store(goid())
	if x.run != nil {
		return x.run(ctx, info.Attempt)
	}
	return arg, nil
}

// heldPool makes rt's pool keep what it is handed, for the test to run
// when it chooses (or never), so that a Get finds a started task no
// goroutine has picked up.
type heldPool struct {
	mu   sync.Mutex
	held []runner
}

func holdPool(rt *Runtime) *heldPool {
	h := &heldPool{}
	rt.mu.Lock()
	rt.pool.hold = func(r runner) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.held = append(h.held, r)
		return true
	}
	rt.mu.Unlock()
	return h
}

// runAll runs what the pool was handed, on the calling goroutine.
func (h *heldPool) runAll() int {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, r := range held {
		r.run()
	}
	return len(held)
}

// heldRuntime is a runtime of one 4-CPU node over executor x whose pool
// holds the runs handed to it (holdPool).
func heldRuntime(t *testing.T, x backend.Executor) (*Runtime, *heldPool) {
	t.Helper()
	rt, err := New(NewStaticSource([]Node{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}), GoroutineRunner{}, Options{NativeValues: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	return rt, holdPool(rt)
}

func claimSpec(retries int) *backend.TaskSpec {
	return &backend.TaskSpec{Name: "t", MaxRetries: retries, RetryOnError: retries > 0,
		Scheduling: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1}, Placement: backend.Placement{Bundle: -1}}}
}

func counted(rt *Runtime) backend.WorkCount {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, w := range rt.counters.snapshot().Work {
		if w.Name == "t" {
			return w
		}
	}
	return backend.WorkCount{}
}

// TestGetRunsTaskItself: a Get whose context cannot end, of a started
// task no pool goroutine has picked up, runs the task on its own
// goroutine, once: the pool goroutine it was handed to finds it claimed
// and does not run it again; it is counted once, and its resources are
// released.
func TestGetRunsTaskItself(t *testing.T) {
	is := is.New(t)
	x := &claimExec{}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{Value: backend.Value{Data: []byte("in")}})
	is.NoErr(err)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "in")
	is.Equal(x.runs.Load(), int32(1))
	is.Equal(x.on.Load(), goid()) // on the Get's goroutine
	is.Equal(held.runAll(), 1)    // the pool's hand-off: claimed already
	is.Equal(x.runs.Load(), int32(1))
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 1, Finished: 1})
	rt.mu.Lock()
	is.Equal(rt.running, 0)
	rt.mu.Unlock()
}

// TestGetWithDeadlineWaits: a Get whose context may end does not run the
// task (it could not return when the context ends); the pool goroutine
// does.
func TestGetWithDeadlineWaits(t *testing.T) {
	is := is.New(t)
	x := &claimExec{}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	id, err := rt.SubmitTaskArg(context.Background(), claimSpec(0), backend.Arg{Value: backend.Value{Data: []byte("in")}})
	is.NoErr(err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := rt.Get(ctx, id)
		got <- err
	}()
	runner := make(chan int64, 1)
	go func() {
		held.runAll()
		runner <- goid()
	}()
	is.NoErr(<-got)
	is.Equal(x.runs.Load(), int32(1))
	is.Equal(x.on.Load(), <-runner) // the pool's goroutine ran it
	held.runAll()
}

// TestGetOfRunningTaskWaits: a task a pool goroutine has picked up is
// not run again by a Get; the Get waits for it.
func TestGetOfRunningTaskWaits(t *testing.T) {
	is := is.New(t)
	entered, release := make(chan struct{}), make(chan struct{})
	x := &claimExec{run: func(ctx context.Context, attempt int) (backend.Value, error) {
		close(entered)
		<-release
		return backend.Value{Data: []byte("out")}, nil
	}}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	ran := make(chan struct{})
	go func() {
		held.runAll()
		close(ran)
	}()
	<-entered
	got := make(chan error, 1)
	go func() {
		v, err := rt.Get(ctx, id)
		if err == nil && string(v.Data) != "out" {
			err = backend.Errorf(backend.Internal, "test", "got %q", v.Data)
		}
		got <- err
	}()
	close(release)
	is.NoErr(<-got)
	<-ran
	is.Equal(x.runs.Load(), int32(1))
}

// TestGetRunsRetries: the attempt a Get runs fails and is retried; the
// Get runs the retry too (no pool goroutine picked it up), and the task
// is counted once.
func TestGetRunsRetries(t *testing.T) {
	is := is.New(t)
	x := &claimExec{run: func(ctx context.Context, attempt int) (backend.Value, error) {
		if attempt == 0 {
			return backend.Value{}, backend.Errorf(backend.TaskFailed, "test", "first attempt fails")
		}
		return backend.Value{Data: []byte("second")}, nil
	}}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(1), backend.Arg{})
	is.NoErr(err)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "second")
	is.Equal(x.on.Load(), goid())
	is.Equal(held.runAll(), 1) // the first attempt's hand-off, claimed already
	is.Equal(x.runs.Load(), int32(2))
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 1, Finished: 1})
}

// TestGetRunTaskCancelled: the task a Get runs has its own context, which
// CancelTask cancels; the Get then reports Canceled.
func TestGetRunTaskCancelled(t *testing.T) {
	is := is.New(t)
	entered := make(chan struct{})
	x := &claimExec{run: func(ctx context.Context, attempt int) (backend.Value, error) {
		close(entered)
		<-ctx.Done()
		return backend.Value{}, ctx.Err()
	}}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	got := make(chan error, 1)
	go func() {
		_, err := rt.Get(ctx, id)
		got <- err
	}()
	<-entered
	is.NoErr(rt.CancelTask(ctx, id, backend.CancelOptions{}))
	err = <-got
	is.Equal(backend.CodeOf(err), backend.Canceled)
	is.Equal(held.runAll(), 1)
	is.Equal(x.runs.Load(), int32(1))
	is.Equal(counted(rt), backend.WorkCount{Name: "t", Submitted: 1, Failed: 1})
}

// TestCloseWaitsForGetRun: Close cancels the context of a task a Get
// runs and waits for it to return, as for a pool goroutine's.
func TestCloseWaitsForGetRun(t *testing.T) {
	is := is.New(t)
	entered, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var returned atomic.Bool
	x := &claimExec{run: func(ctx context.Context, attempt int) (backend.Value, error) {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		<-release
		returned.Store(true)
		return backend.Value{}, ctx.Err()
	}}
	rt, held := heldRuntime(t, x)
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	got := make(chan error, 1)
	go func() {
		_, err := rt.Get(ctx, id)
		got <- err
	}()
	<-entered
	closed := make(chan struct{})
	go func() {
		rt.Close()
		close(closed)
	}()
	<-cancelled
	select {
	case <-closed:
		t.Fatal("Close returned while the task a Get runs had not")
	default:
	}
	close(release)
	<-closed
	is.True(returned.Load())
	is.True(<-got != nil) // the cluster closed
	held.runAll()
}

// panicExec panics in RunTask.
type panicExec struct{ echoExec }

func (panicExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	panic("executor bug")
}

// TestGetRunPanics: a panic out of the executor, on the Get's goroutine,
// fails the task with Internal (its resources released, Close not left
// waiting) and goes on up the Get's caller.
func TestGetRunPanics(t *testing.T) {
	is := is.New(t)
	rt, err := New(NewStaticSource([]Node{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}), GoroutineRunner{}, Options{NativeValues: true})
	is.NoErr(err)
	is.NoErr(rt.Start(context.Background(), panicExec{}))
	held := holdPool(rt)
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{})
	is.NoErr(err)
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_, _ = rt.Get(ctx, id)
	}()
	is.Equal(recovered, "executor bug")
	cctx, cancel := context.WithCancel(ctx) // a Get that does not claim
	defer cancel()
	_, err = rt.Get(cctx, id)
	is.Equal(backend.CodeOf(err), backend.Internal)
	is.Equal(held.runAll(), 1)
	rt.mu.Lock()
	is.Equal(rt.running, 0)
	rt.mu.Unlock()
	is.NoErr(rt.Close())
}
