package cluster

import (
	"context"
	"sync"
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

	mu     sync.Mutex
	done   chan struct{}
	err    error
	forced bool // cancelled by CancelTask with Force
	afters map[*afterFunc]struct{}
}

type afterFunc struct{ f func() }

var _ context.Context = (*taskCtx)(nil)

func (c *taskCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *taskCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		}
	}
	return c.done
}

func (c *taskCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
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
func (c *taskCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &afterFunc{f: f}
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	if c.afters == nil {
		c.afters = map[*afterFunc]struct{}{}
	}
	c.afters[a] = struct{}{}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.afters[a]; !ok {
			return false
		}
		delete(c.afters, a)
		return true
	}
}

func (c *taskCtx) cancel() { c.cancelRun(false) }

// cancelRun cancels the context; with force, executors that run the task
// in a worker process end that process (backend.CancelForced).
func (c *taskCtx) cancelRun(force bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.forced = force
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	for a := range c.afters {
		go a.f()
	}
	c.afters = nil
}

func (c *taskCtx) String() string { return "goray task context" }

// run runs the task's user code on a pool goroutine and records the result.
// It then runs, on the same goroutine, the queued tasks that finishing
// this one lets start.
func (c *taskCtx) run() {
	for c != nil {
		v, err := c.b.exec.RunTask(c, c.t.spec.Name, c.t.arg, &c.info)
		c = c.b.finishTask(c.t, c.attempt, v, err)
	}
}
