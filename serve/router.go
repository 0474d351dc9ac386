package serve

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/goray-dev/goray/backend"
)

// Routing: each request goes to the less loaded of two ready replicas
// drawn at random among those below MaxConcurrentRequests (power of two
// choices on ongoing requests). When none has room, the request waits in a
// FIFO queue of at most MaxQueuedRequests; a replica that frees a slot (or
// becomes ready) hands it straight to the queue's head.

// The router's refusals. A handle call's error matches them with
// errors.Is (see [CallError]); an HTTP client gets 503 with Retry-After.
var (
	// ErrOverloaded: every replica of the deployment is at its
	// MaxConcurrentRequests and its queue holds MaxQueuedRequests.
	ErrOverloaded error = &backend.Error{Code: backend.ResourceExhausted, Err: errors.New("every replica is at its limit and the queue is full")}
	// ErrShuttingDown: the deployment (or its server) is being removed.
	ErrShuttingDown error = &backend.Error{Code: backend.Unavailable, Err: errors.New("deployment is shutting down")}
	// ErrNoReplica: the deployment served before, and now none of its
	// replicas is ready (every one was lost: dead hosts, dead actors,
	// failed health checks), so a request is refused at once instead of
	// waiting out its timeout while replacements start.
	ErrNoReplica error = &backend.Error{Code: backend.Unavailable, Err: errors.New("no replica is ready: every replica was lost and no replacement is ready yet")}
)

// waiter is a queued request.
type waiter struct {
	ch      chan *replica // receives the replica, or nil when the queue is closed
	err     error         // with nil: why (ErrNoReplica); else shutting down
	exclude []*replica
	model   string     // the request's model on a multiplexed deployment
	slot    *modelSlot // its slot on the replica handed over, with model
}

// acquire returns a ready replica with a free slot, taken for the caller,
// waiting in the queue if need be. exclude lists replicas that already
// failed this request.
func (d *deployment) acquire(ctx context.Context, exclude []*replica) (*replica, error) {
	r, _, err := d.acquireModel(ctx, exclude, "")
	return r, err
}

// acquireModel is acquire for a request naming model (on a multiplexed
// deployment; "" for none), which also returns the request's slot of the
// model on the replica (nil without one), for ensureModel and
// releaseModel.
func (d *deployment) acquireModel(ctx context.Context, exclude []*replica, model string) (*replica, *modelSlot, error) {
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return nil, nil, ErrShuttingDown
	}
	if len(d.waiters) == 0 {
		if r, s := d.pickTakeForLocked(exclude, model); r != nil {
			d.mu.Unlock()
			return r, s, nil
		}
	}
	if d.outageLocked() {
		d.mu.Unlock()
		return nil, nil, ErrNoReplica
	}
	if len(d.waiters) >= d.spec.MaxQueuedRequests {
		d.mu.Unlock()
		return nil, nil, ErrOverloaded
	}
	w := &waiter{ch: make(chan *replica, 1), exclude: exclude, model: model}
	d.waiters = append(d.waiters, w)
	d.dispatchLocked() // a free replica that queued retries exclude
	d.changedLocked()
	d.mu.Unlock()
	select {
	case r := <-w.ch:
		if r == nil {
			return nil, nil, cmp.Or(w.err, ErrShuttingDown)
		}
		return r, w.slot, nil
	case <-ctx.Done():
	}
	d.mu.Lock()
	if i := slices.Index(d.waiters, w); i >= 0 {
		d.waiters = slices.Delete(d.waiters, i, i+1)
		d.changedLocked() // the queue is shorter: WaitStatus sees it
		d.mu.Unlock()
		return nil, nil, ctx.Err()
	}
	d.mu.Unlock()
	// The replica was handed over as ctx ended: give the slot back.
	if r := <-w.ch; r != nil {
		if w.slot != nil {
			releaseModel(w.slot)
		}
		d.release(r)
	}
	return nil, nil, ctx.Err()
}

// release gives back a slot taken by acquire. The slot is one of r's own
// deployment, which during a rolling update may be the version after d.
func (d *deployment) release(r *replica) {
	o := r.d
	o.mu.Lock()
	r.ongoing--
	r.served++
	if r.ongoing == 0 {
		o.closeDrainedLocked(r)
	}
	o.dispatchLocked()
	o.changedLocked()
	prev := o.prev
	o.mu.Unlock()
	prev.dispatch() // the version before o queues for o's replicas too
}

// dispatch hands free slots to d's queued requests; d may be nil.
func (d *deployment) dispatch() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.dispatchLocked()
	d.mu.Unlock()
}

// closeDrainedLocked ends a drain wait on r. d.mu must be held.
func (d *deployment) closeDrainedLocked(r *replica) {
	if r.drained != nil {
		close(r.drained)
		r.drained = nil
	}
}

// pickTakeLocked picks a replica with a free slot for a request of d and
// takes the slot, or returns nil. During a rolling update (d.next set)
// the new version's ready replicas take d's requests too: the less loaded
// of d's pick and the next version's wins. d.mu must be held; it takes
// d.next.mu (locks go from a version to the one after it, never back).
func (d *deployment) pickTakeLocked(exclude []*replica) *replica {
	r := d.pickLocked(exclude)
	if n := d.next; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		if nr := n.pickLocked(exclude); nr != nil && (r == nil || nr.ongoing < r.ongoing || (nr.ongoing == r.ongoing && rand.IntN(2) == 0)) {
			r = nr
		}
	}
	if r != nil {
		r.d.takeLocked(r)
	}
	return r
}

// takeLocked counts a request routed to r, one of d's replicas. d.mu must
// be held.
func (d *deployment) takeLocked(r *replica) {
	r.ongoing++
	d.changedLocked()
	if !r.firstReq {
		r.firstReq = true
		d.s.metrics.dep(d.spec.Name).scaleUp.Update(time.Since(r.created).Seconds())
		d.lastScaleUp = time.Since(r.created)
	}
}

// dispatchLocked hands free slots to queued requests in order. A retried
// request that excludes the only free replica, or a request for a model
// no free replica can take now, lets the ones behind it pass. d.mu must be
// held.
func (d *deployment) dispatchLocked() {
	for i := 0; i < len(d.waiters); {
		w := d.waiters[i]
		r, s := d.pickTakeForLocked(w.exclude, w.model)
		if r == nil {
			if len(w.exclude) == 0 && w.model == "" {
				return // no free slot at all
			}
			i++
			continue
		}
		w.slot = s
		d.waiters = slices.Delete(d.waiters, i, i+1)
		w.ch <- r
	}
}

// outageLocked reports whether d is in an outage: it served before, and
// neither it nor the version it shares its requests with during a
// rolling update (d.next) has a ready replica now. Requests are refused
// with ErrNoReplica then, as a proxy with no healthy upstream does,
// instead of waiting for replacements that may need capacity the cluster
// no longer has. d.mu must be held; it takes d.next.mu.
func (d *deployment) outageLocked() bool {
	if !d.served || d.anyReadyLocked() {
		return false
	}
	if n := d.next; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		return !n.anyReadyLocked()
	}
	return true
}

// anyReadyLocked reports whether a replica of d is ready. d.mu must be
// held.
func (d *deployment) anyReadyLocked() bool {
	return slices.ContainsFunc(d.replicas, func(r *replica) bool { return r.state == stateReady })
}

// failQueueLocked fails every queued request with err. d.mu must be held.
func (d *deployment) failQueueLocked(err error) {
	for _, w := range d.waiters {
		w.err = err
		w.ch <- nil
	}
	d.waiters = nil
}

// closeQueueLocked fails every queued request. d.mu must be held.
func (d *deployment) closeQueueLocked() {
	for _, w := range d.waiters {
		w.ch <- nil
	}
	d.waiters = nil
}

// overloaded reports whether a request would be refused as overloaded now:
// no replica has a free slot and the queue is full.
func (d *deployment) overloaded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.waiters) < d.spec.MaxQueuedRequests || d.pickLocked(nil) != nil {
		return false
	}
	if n := d.next; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.pickLocked(nil) == nil
	}
	return true
}

// othersReady reports whether a ready replica outside exclude exists (a
// retry could go there, now or once it has a free slot).
func (d *deployment) othersReady(exclude []*replica) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	ready := func(r *replica) bool { return r.state == stateReady && !slices.Contains(exclude, r) }
	if slices.ContainsFunc(d.replicas, ready) {
		return true
	}
	if n := d.next; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		return slices.ContainsFunc(n.replicas, ready)
	}
	return false
}

// pickLocked chooses one of d's ready replicas below its limit by power of
// two choices, or nil. d.mu must be held.
func (d *deployment) pickLocked(exclude []*replica) *replica {
	ok := func(r *replica) bool {
		return r.state == stateReady && r.ongoing < d.spec.MaxConcurrentRequests && !slices.Contains(exclude, r)
	}
	n := 0
	for _, r := range d.replicas {
		if ok(r) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	nth := func(k int) *replica {
		for _, r := range d.replicas {
			if ok(r) {
				if k == 0 {
					return r
				}
				k--
			}
		}
		return nil
	}
	a := nth(rand.IntN(n))
	if n == 1 {
		return a
	}
	i := rand.IntN(n - 1)
	b := nth(i)
	if b == a {
		b = nth(n - 1)
	}
	if b.ongoing < a.ongoing {
		return b
	}
	return a
}
