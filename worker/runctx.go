package worker

import (
	"context"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// runCtx is the context of a task a worker runs: cancelled only by its
// connection (a cancel or kill from the driver, the connection's end),
// never by a deadline, and carrying the run's RuntimeInfo. One allocation
// replaces context.WithCancel and the context.WithValue with which package
// ray would add the info; the info is the connection's shared decoded one
// (nothing modifies it), copied only when the decoder did not share it;
// the Done channel is made only if the code asks for it.
type runCtx struct {
	info *backend.RuntimeInfo

	mu     sync.Mutex
	done   chan struct{}
	err    error
	afters map[*runAfter]struct{}
}

// runAfter is a function registered with runCtx.AfterFunc.
type runAfter struct{ f func() }

var _ context.Context = (*runCtx)(nil)

// newRunCtx returns the context of a task run with info (nil for none):
// info itself if shared (an immutable value the context may keep), else a
// copy.
func newRunCtx(info *backend.RuntimeInfo, shared bool) *runCtx {
	if info != nil && !shared {
		cp := *info
		info = &cp
	}
	return &runCtx{info: info}
}

// runInfo returns the context's RuntimeInfo, nil for none.
func (c *runCtx) runInfo() *backend.RuntimeInfo { return c.info }

func (c *runCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *runCtx) Done() <-chan struct{} {
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

func (c *runCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *runCtx) Value(key any) any {
	if _, ok := key.(backend.RuntimeInfoKey); ok && c.info != nil {
		return c.info
	}
	return nil
}

// AfterFunc lets context.WithCancel and friends derive from a runCtx
// without a goroutine per derived context (the context package looks for
// it): f runs in its own goroutine once the context is cancelled, at once
// if it is already.
func (c *runCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	a := &runAfter{f: f}
	if c.afters == nil {
		c.afters = map[*runAfter]struct{}{}
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

// cancel cancels the context with context.Canceled; later calls do
// nothing.
func (c *runCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	for a := range c.afters {
		go a.f()
	}
	c.afters = nil
}

func (c *runCtx) String() string { return "goray worker task context" }
