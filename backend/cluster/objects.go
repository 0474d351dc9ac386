package cluster

import (
	"context"
	"sync"

	"github.com/goray-dev/goray/backend"
)

// object is an entry of the object store. Objects live in the pages of
// the object table (objtable.go), by value, so the fields are ordered to
// leave no padding.
type object struct {
	id  backend.ObjectID
	ch  chan getResult // created on the first wait before done; closed when done (or sent the result, chPooled)
	val backend.Value
	err error
	// owner is true while the caller's ref holds the object; deps counts
	// queued work that will read it.
	deps  int32
	owner bool
	done  bool
	// chPooled: ch came from waitChans for a single waiter, and
	// completion sends to it instead of closing it.
	chPooled bool
	// work says whose result this is: a task's or an actor call's (task
	// or call is set until it is done, and dropped then, so that the
	// finished record is garbage at once), or neither (Put).
	work workKind
	// wait holds the work and the Wait calls waiting for the object; nil
	// while there are none, as for most objects, which keeps the object
	// (and the task it is stored in) small.
	wait *objWait
	// task is the task whose result this is, or nil; nil once done.
	task *task
	// call is the actor call whose result this is, or nil; nil once done.
	call *call
}

type workKind uint8

const (
	workNone workKind = iota
	workTask
	workCall
)

type objWait struct {
	// dependents run when the object is done.
	dependents []dependent
	waiters    []*waiter
}

// waits returns o.wait, making it if need be.
func (o *object) waits() *objWait {
	if o.wait == nil {
		o.wait = &objWait{}
	}
	return o.wait
}

// dependent is work waiting for an object.
type dependent struct {
	t *task
	c *call
}

type waiter struct {
	left int
	ch   chan struct{}
}

// newObject makes an object owned by the caller's ref. rt.mu must be held.
func (rt *Runtime) newObject() *object {
	o := rt.objects.add(backend.ObjectID(rt.newID()))
	o.owner = true
	return o
}

// completeLocked records an object's result and wakes whoever waits for
// it. A deleted object (id 0: freed before its work finished) is left
// alone.
func (rt *Runtime) completeLocked(o *object, v backend.Value, err error) {
	if o.done || o.id == 0 {
		return
	}
	o.done, o.val, o.err = true, v, err
	rt.counters.objectDone(o, err)
	if err != nil && rt.failed != nil {
		close(rt.failed)
		rt.failed = nil
	}
	o.task, o.call = nil, nil // the work's record is no longer needed
	if o.ch != nil {
		switch {
		case rt.holdWakes:
			rt.heldWakes = append(rt.heldWakes, heldWake{ch: o.ch, pooled: o.chPooled, r: getResult{v, err}})
		case o.chPooled:
			o.ch <- getResult{v, err} // its one waiter's; buffered, never blocks
		default:
			close(o.ch)
		}
	}
	wait := o.wait
	o.wait = nil
	if wait == nil {
		rt.maybeDelete(o)
		return
	}
	for _, w := range wait.waiters {
		w.left--
		if w.left == 0 {
			close(w.ch)
		}
	}
	for _, d := range wait.dependents {
		if d.t != nil {
			rt.resolveTaskDep(d.t, o)
		} else {
			rt.resolveCallDep(d.c, o)
		}
	}
	rt.maybeDelete(o)
}

// heldWake is the wake-up of the Get waiting for a completed object, held
// for Flush: the object's channel, and what to send to it (pooled) or
// that it is to be closed.
type heldWake struct {
	ch     chan getResult
	pooled bool
	r      getResult
}

var _ backend.Flusher = (*Runtime)(nil)

// Flush implements backend.Flusher: it wakes the Gets of the results
// delivered held (taskCtx.TaskDoneHeld) since the last Flush.
func (rt *Runtime) Flush() {
	rt.mu.Lock()
	held := rt.heldWakes
	if len(held) == 0 {
		rt.mu.Unlock()
		return
	}
	rt.heldWakes, rt.spareWakes = rt.spareWakes, nil
	rt.mu.Unlock()
	for i, w := range held {
		if w.pooled {
			w.ch <- w.r // its one waiter's; buffered, never blocks
		} else {
			close(w.ch)
		}
		held[i] = heldWake{}
	}
	rt.mu.Lock()
	rt.spareWakes = held[:0]
	rt.mu.Unlock()
}

func (rt *Runtime) maybeDelete(o *object) {
	if o.done && !o.owner && o.deps == 0 {
		rt.objects.del(o.id)
	}
}

// Put implements backend.Backend.
func (rt *Runtime) Put(ctx context.Context, v backend.Value) (backend.ObjectID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck("put object"); err != nil {
		return 0, err
	}
	o := rt.newObject()
	rt.completeLocked(o, v, nil)
	return o.id, nil
}

// Get implements backend.Backend.
func (rt *Runtime) Get(ctx context.Context, id backend.ObjectID) (backend.Value, error) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return backend.Value{}, backend.Errorf(backend.FailedPrecondition, "get object", "%w", backend.ErrClosed)
	}
	o := rt.objects.get(id)
	if o == nil {
		rt.mu.Unlock()
		return backend.Value{}, backend.Errorf(backend.NotFound, "get object", "object %s does not exist (never created, or freed)", id)
	}
	if o.done {
		rt.mu.Unlock()
		return o.val, o.err
	}
	if c := rt.claimForGet(ctx, o); c != nil {
		rt.mu.Unlock()
		return rt.runClaimed(ctx, c, id)
	}
	if o.ch == nil {
		// The usual single waiter takes a channel from a pool, which
		// completion sends to instead of closing.
		ch := waitChans.Get().(chan getResult)
		o.ch, o.chPooled = ch, true
		rt.mu.Unlock()
		return rt.waitPooled(ctx, o, id, ch)
	}
	if o.chPooled {
		// A second waiter: the channel will be closed, not sent to (and
		// so not go back to the pool).
		o.chPooled = false
	}
	ch := o.ch
	rt.mu.Unlock()
	select {
	case <-ch:
		return rt.result(o, id)
	case <-ctx.Done():
		return backend.Value{}, ctx.Err()
	}
}

// result returns the result of the done object o, which was id: a Free
// racing with the wait may have deleted it (and cleared its slot) since
// it was done, so it is read under rt.mu.
func (rt *Runtime) result(o *object, id backend.ObjectID) (backend.Value, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if o.id != id {
		return backend.Value{}, backend.Errorf(backend.NotFound, "get object", "object %s was freed while waiting for it", id)
	}
	return o.val, o.err
}

// getResult is what completion sends a single waiter: the result itself,
// so that the waiter need not read the object (which a racing Free may
// clear) and take the lock again.
type getResult struct {
	v   backend.Value
	err error
}

// waitChans holds the one-result channels of single waiters (Get).
var waitChans = sync.Pool{New: func() any { return make(chan getResult, 1) }}

// waitPooled waits for o as its first waiter, on ch from waitChans, and
// returns ch to the pool if completion sent to it rather than closed it
// (a second waiter came).
func (rt *Runtime) waitPooled(ctx context.Context, o *object, id backend.ObjectID, ch chan getResult) (backend.Value, error) {
	if done := ctx.Done(); done != nil {
		select {
		case r, sent := <-ch:
			if sent {
				waitChans.Put(ch)
				return r.v, r.err
			}
			return rt.result(o, id)
		case <-done:
		}
		rt.mu.Lock()
		if o.id == id && !o.done {
			if o.ch == ch && o.chPooled {
				o.ch, o.chPooled = nil, false
				waitChans.Put(ch) // nothing was sent to it
			}
			rt.mu.Unlock()
			return backend.Value{}, ctx.Err()
		}
		rt.mu.Unlock()
	}
	// Done: the result is sent or the channel closed.
	if r, sent := <-ch; sent {
		waitChans.Put(ch)
		return r.v, r.err
	}
	return rt.result(o, id)
}

var _ backend.AllWaiter = (*Runtime)(nil)

// WaitAll implements backend.AllWaiter. Results come mostly in the order
// their work was submitted, so it waits for the last of ids that is not
// done, on the channel a Get of it would wait on (no allocation; a
// result delivered held wakes it at Flush), and looks again when woken:
// a GetAll of a thousand results that arrive in bursts is woken once
// instead of once per burst. Any failure (rt.failed) wakes it too, and
// it returns as soon as one of ids has failed.
//
// It waits only when tasks are started without a goroutine waiting for
// each (rt.starter: worker processes); otherwise it returns at once, for
// a Get in turn may run a task on the caller (claimForGet).
func (rt *Runtime) WaitAll(ctx context.Context, ids []backend.ObjectID) {
	for {
		rt.mu.Lock()
		if rt.closed || rt.starter == nil || ctx.Err() != nil {
			rt.mu.Unlock()
			return
		}
		var last *object
		var lastID backend.ObjectID
		for i := len(ids) - 1; i >= 0; i-- {
			o := rt.objects.get(ids[i])
			if o == nil || o.done && o.err != nil {
				rt.mu.Unlock()
				return // the Gets report it
			}
			if last == nil && !o.done {
				last, lastID = o, ids[i]
			}
		}
		if last == nil {
			rt.mu.Unlock()
			return
		}
		if rt.failed == nil {
			rt.failed = make(chan struct{})
		}
		failed := rt.failed
		ch, pooled := last.ch, false
		switch {
		case ch == nil:
			ch, pooled = waitChans.Get().(chan getResult), true
			last.ch, last.chPooled = ch, true
		case last.chPooled:
			last.chPooled = false // a second waiter: the channel is closed
		}
		rt.mu.Unlock()
		select {
		case _, sent := <-ch:
			if sent {
				waitChans.Put(ch)
			}
			continue
		case <-failed:
		case <-ctx.Done():
		}
		if pooled {
			rt.mu.Lock()
			if last.id == lastID && !last.done && last.ch == ch && last.chPooled {
				last.ch, last.chPooled = nil, false
				waitChans.Put(ch) // nothing was sent to it
			}
			rt.mu.Unlock()
		}
		return
	}
}

// Wait implements backend.Backend.
func (rt *Runtime) Wait(ctx context.Context, ids []backend.ObjectID, n int) ([]bool, error) {
	ready := make([]bool, len(ids))
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return ready, backend.Errorf(backend.FailedPrecondition, "wait for objects", "%w", backend.ErrClosed)
	}
	objs := make([]*object, len(ids))
	count := 0
	for i, id := range ids {
		o := rt.objects.get(id)
		if o == nil {
			rt.mu.Unlock()
			return ready, backend.Errorf(backend.NotFound, "wait for objects", "object %s does not exist (never created, or freed)", id)
		}
		objs[i] = o
		if o.done {
			count++
		}
	}
	var w *waiter
	if count < n {
		w = &waiter{left: n - count, ch: make(chan struct{})}
		for _, o := range objs {
			if !o.done {
				o.waits().waiters = append(o.waits().waiters, w)
			}
		}
	}
	rt.mu.Unlock()
	var err error
	if w != nil {
		select {
		case <-w.ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	rt.mu.Lock()
	for i, o := range objs {
		// A deleted object (freed meanwhile) was done: deletion needs it.
		ready[i] = o.done || o.id != ids[i]
		if w != nil && !o.done && o.wait != nil {
			for j, x := range o.wait.waiters {
				if x == w {
					o.wait.waiters = append(o.wait.waiters[:j], o.wait.waiters[j+1:]...)
					break
				}
			}
		}
	}
	rt.mu.Unlock()
	return ready, err
}

// Free implements backend.Backend.
func (rt *Runtime) Free(ids ...backend.ObjectID) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, id := range ids {
		if o := rt.objects.get(id); o != nil && o.owner {
			o.owner = false
			rt.maybeDelete(o)
		}
	}
}

// lookupDep finds a dependency object for a submission.
func (rt *Runtime) lookupDep(op string, id backend.ObjectID) (*object, error) {
	o := rt.objects.get(id)
	if o == nil {
		return nil, backend.Errorf(backend.NotFound, op, "input object %s does not exist (never created, or freed)", id)
	}
	return o, nil
}
