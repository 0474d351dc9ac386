package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// taskCtx is the context of one run of user code: cancelled by the backend
// (node death, group removal, kill, Close), never by a deadline, and
// carrying the run's RuntimeInfo. One allocation replaces
// context.WithCancel plus context.WithValue on the hot path; its Done
// channel is made only if the code asks for it.
type taskCtx struct {
	info backend.RuntimeInfo
	// The run: the backend, the task and the attempt being run.
	b       *Runtime
	t       *task
	attempt int

	lazyCancel
}

type afterFunc struct{ f func() }

var _ context.Context = (*taskCtx)(nil)

func (c *taskCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *taskCtx) Done() <-chan struct{} { return c.doneChan(nil) }

func (c *taskCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause.err()
}

func (c *taskCtx) Value(key any) any {
	switch key {
	case any(backend.RuntimeInfoKey{}):
		return &c.info
	case backend.ForceCancelKey:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.forced
	}
	return nil
}

// AfterFunc lets context.WithCancel and friends derive from a taskCtx
// without starting a goroutine (the context package looks for it).
func (c *taskCtx) AfterFunc(f func()) (stop func() bool) { return c.afterFunc(f, nil) }

func (c *taskCtx) cancel() { c.cancelRun(false) }

// cancelRun cancels the context; with force, executors that run the task
// in a worker process end that process (backend.CancelForced).
func (c *taskCtx) cancelRun(force bool) {
	c.cancelWith(context.Canceled, func() { c.forced = force })
}

func (c *taskCtx) String() string { return "goray task context" }

// run runs the task's user code on a pool goroutine and records the result.
// It then runs, on the same goroutine, the queued tasks that finishing
// this one lets start.
//
// When the executor is a backend.TaskStarter that starts the task, run
// only starts it: its TaskDone finishes it.
func (c *taskCtx) run() {
	if s := c.b.starter; s != nil && s.StartTask(c, c.t.spec.Name, c.t.arg, &c.info, c) {
		return
	}
	for c != nil && c.claim() {
		v, err := c.b.exec.RunTask(c, c.t.spec.Name, c.t.arg, &c.info)
		c = c.b.finishTask(c.t, c.attempt, v, err)
	}
}

// startHere starts a task that a submission started (submitTaskLocked),
// on the submitting goroutine, with rt.mu not held and the start counted
// in rt.wg. When the starter cannot start it (its worker is not
// connected), the task goes to the pool, to be run with RunTask by a
// goroutine that may wait.
func (c *taskCtx) startHere() {
	b := c.b
	defer b.wg.Done()
	if !b.starter.StartTask(c, c.t.spec.Name, c.t.arg, &c.info, c) {
		b.pool.run(c)
	}
}

// claim reports whether the caller is the one to run this attempt: a pool
// goroutine and a Get of the task's result (getclaim.go) may both try;
// the first wins.
func (c *taskCtx) claim() bool { return c.claimed.CompareAndSwap(0, 1) }

// TaskDone implements backend.TaskDone for a task started with the
// executor's StartTask. The tasks that finishing this one lets start are
// started from here, on the goroutine that delivered the result (a worker
// connection's reader), sparing a hand-off per task.
func (c *taskCtx) TaskDone(v backend.Value, err error) {
	c.done(v, err, false)
}

var _ backend.TaskDoneHolder = (*taskCtx)(nil)

// TaskDoneHeld implements backend.TaskDoneHolder: TaskDone, except that
// the Get waiting for the result is woken by the runtime's Flush (which
// the starter calls once it has delivered the results it has), so that a
// Get of many refs is woken once per burst of results rather than once
// per result, and does not contend for rt.mu with the deliveries.
func (c *taskCtx) TaskDoneHeld(v backend.Value, err error) backend.Flusher {
	b := c.b // c may be reused for another task once done returns
	c.done(v, err, true)
	return b
}

// done finishes the attempt whose result a TaskStarter delivered. Once
// finishTaskHold returns, c's record may be another task's (reuseTask):
// done does not read c after that.
func (c *taskCtx) done(v backend.Value, err error, hold bool) {
	next := c.b.finishTaskHold(c.t, c.attempt, v, err, hold, true)
	if next != nil && !next.b.starter.StartTask(next, next.t.spec.Name, next.t.arg, &next.info, next) {
		next.b.pool.run(next) // to be run with RunTask, on a goroutine that may wait
	}
}

// lazyCancel is the cancellation of taskCtx and callRun: a context's
// error, its Done channel made only if asked for, and the functions
// registered by AfterFunc, under one mutex.
type lazyCancel struct {
	mu   sync.Mutex
	done chan struct{}
	// one is the first function registered, if not stopped, and oneID
	// its registration's number: the usual single watch costs only its
	// stop function.
	one    func()
	oneID  uint64
	afters map[*afterFunc]struct{}
	// cause is the context's error, as one byte (a context's Err is
	// context.Canceled or context.DeadlineExceeded): a task's context is
	// part of its record, which this keeps in a smaller size class.
	cause ctxCause
	// forced: a task's context cancelled by CancelTask with Force.
	forced bool
	// claimed is set (0 to 1) by whoever runs a task's attempt: the pool
	// goroutine it was handed to, or a Get that runs it itself
	// (getclaim.go). Only taskCtx uses it; it sits here, in padding.
	claimed atomic.Uint32
}

// ctxCause is a context's error: none, context.Canceled or
// context.DeadlineExceeded.
type ctxCause uint8

const (
	notCancelled ctxCause = iota
	causeCanceled
	causeDeadline
)

// causeOf is the cause of a context error; any error but
// context.DeadlineExceeded counts as context.Canceled, which is what a
// context reports when cancelled for a reason other than its deadline.
func causeOf(err error) ctxCause {
	if err == context.DeadlineExceeded {
		return causeDeadline
	}
	return causeCanceled
}

func (c ctxCause) err() error {
	switch c {
	case causeCanceled:
		return context.Canceled
	case causeDeadline:
		return context.DeadlineExceeded
	}
	return nil
}

// doneChan returns the Done channel, making it (and calling first, with
// mu held, if not yet cancelled) on the first call.
func (l *lazyCancel) doneChan(first func()) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.cause != notCancelled {
			close(l.done)
		} else if first != nil {
			first()
		}
	}
	return l.done
}

// afterFunc runs f once cancelled (at once, in a goroutine, if already);
// first is called with mu held when f is registered.
func (l *lazyCancel) afterFunc(f, first func()) (stop func() bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != notCancelled {
		go f()
		return func() bool { return false }
	}
	if first != nil {
		first()
	}
	if l.one == nil && l.afters == nil {
		// The usual single watch needs no map, and no record: its
		// stop function knows it by number.
		l.oneID++
		l.one = f
		id := l.oneID
		return func() bool { return l.stopOne(id) }
	}
	a := &afterFunc{f: f}
	if l.afters == nil {
		l.afters = map[*afterFunc]struct{}{}
	}
	l.afters[a] = struct{}{}
	return a.stopper(l)
}

// stopper returns the stop function of a registered by afterFunc.
func (a *afterFunc) stopper(l *lazyCancel) func() bool {
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.afters[a]; !ok {
			return false
		}
		delete(l.afters, a)
		return true
	}
}

// cancelWith cancels with err, unless already cancelled; also runs with mu
// held, before the Done channel closes.
func (l *lazyCancel) cancelWith(err error, also func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cause != notCancelled {
		return
	}
	if also != nil {
		also()
	}
	l.cause = causeOf(err)
	if l.done != nil {
		close(l.done)
	}
	if l.one != nil {
		go l.one()
		l.one = nil
	}
	for a := range l.afters {
		go a.f()
	}
	l.afters = nil
}
