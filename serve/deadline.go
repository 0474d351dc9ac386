package serve

import (
	"context"
	"slices"
	"sync"
	"time"
)

// deadlineCtx is context.WithTimeout made lazily, for a request's
// RequestTimeout: it starts no timer and joins no list of its parent's
// children until something asks for its Done channel or registers an
// AfterFunc. Until then Err compares the clock with the deadline and asks
// the parent. A request whose call runs on the handler's goroutine and
// never waits (an in-process actor with a free slot) then costs one
// allocation instead of a timer and two cancellation links.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time

	mu       sync.Mutex
	err      error
	done     chan struct{} // made when asked for
	watching bool          // the timer and the parent's watch are set
	timer    *time.Timer
	stop     func() bool // stops watching the parent
	afters   []*afterFunc
}

type afterFunc struct{ f func() }

// withDeadline returns parent with a deadline timeout from now (or the
// parent's, if sooner), and the function that cancels it.
func withDeadline(parent context.Context, timeout time.Duration) (*deadlineCtx, context.CancelFunc) {
	c := &deadlineCtx{parent: parent, deadline: time.Now().Add(timeout)}
	return c, c.cancelFunc
}

func (c *deadlineCtx) cancelFunc() { c.cancel(context.Canceled) }

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *deadlineCtx) Value(key any) any { return c.parent.Value(key) }

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkLocked()
	return c.err
}

// checkLocked cancels c when its parent ended or its deadline passed.
func (c *deadlineCtx) checkLocked() {
	if c.err != nil {
		return
	}
	if err := c.parent.Err(); err != nil {
		c.cancelLocked(err)
	} else if !time.Now().Before(c.deadline) {
		c.cancelLocked(context.DeadlineExceeded)
	}
}

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.checkLocked()
		if c.err != nil {
			close(c.done)
		}
	}
	c.watchLocked()
	return c.done
}

// AfterFunc lets context.AfterFunc and contexts derived from c follow it
// without a goroutine each (the context package looks for the method).
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkLocked()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	c.watchLocked()
	a := &afterFunc{f}
	c.afters = append(c.afters, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, a)
		if i < 0 {
			return false
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		return true
	}
}

// unwatched returns c's parent and deadline, and true, while nothing
// watches c (no timer, no link to the parent) and it has not ended: a
// caller that can keep the deadline itself (a connection's deadline)
// then needs to watch only the parent.
func (c *deadlineCtx) unwatched() (context.Context, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watching || c.err != nil {
		return nil, time.Time{}, false
	}
	dl := c.deadline
	if d, ok := c.parent.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	return c.parent, dl, true
}

// watchLocked starts the timer and the parent's watch, once, unless c
// has ended.
func (c *deadlineCtx) watchLocked() {
	if c.watching || c.err != nil {
		return
	}
	c.watching = true
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
	c.stop = context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
}

func (c *deadlineCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelLocked(err)
}

func (c *deadlineCtx) cancelLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	for _, a := range c.afters {
		go a.f()
	}
	c.afters = nil
	if c.watching {
		c.timer.Stop()
		c.stop()
	}
}

func (c *deadlineCtx) String() string { return "serve request context" }
