package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// intactIdle counts the pool's slices that could be reserved now: every
// host up, not reserved, claimed or held by another driver. p may be nil.
func (p *shapePool) intactIdle() int {
	if p == nil {
		return 0
	}
	n := 0
	for _, s := range p.all {
		if s.idle() {
			n++
		}
	}
	return n
}

// poolFor is the pool of shape, made (empty) if the cluster has no slice
// of that shape yet: a reservation waiting for provisioned slices queues
// there. b.mu must be held.
func (x *sliceIndex) poolFor(shape tpu.SliceShape) *shapePool {
	key := shapeKey(shape)
	pool := x.pools[key]
	if pool == nil {
		pool = &shapePool{key: key, shape: shape}
		x.pools[key] = pool
		x.order = append(x.order, pool)
	}
	return pool
}

// provisionCloseTimeout bounds Provisioning.Close.
const provisionCloseTimeout = 30 * time.Second

// provisioned is what one reservation asked a Provisioner for.
type provisioned struct {
	pr    Provisioner
	req   ProvisionRequest // Name and Shape
	mu    sync.Mutex
	asked int // slices, in all
	provs []Provisioning
	off   bool // the source said it does not provision
	// fail, if set, fails the waiting reservation: a provisioning that
	// is a ProvisioningFailer reported that its request failed for good.
	fail func(error)
	done chan struct{} // closed by close: the watchers of Failed end
}

// ask asks for more slices, up to short in all; it reports whether the
// source provisions.
func (q *provisioned) ask(ctx context.Context, short int) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.off || short <= q.asked {
		return !q.off, nil
	}
	req := q.req
	req.NumSlices = short - q.asked
	prov, err := q.pr.Provision(ctx, req)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		q.off = true
		return false, nil
	case err != nil:
		return true, err
	}
	q.asked = short
	q.provs = append(q.provs, prov)
	if f, ok := prov.(ProvisioningFailer); ok && q.fail != nil {
		failed, done, fail := f.Failed(), q.done, q.fail
		go func() {
			select {
			case err := <-failed:
				if err != nil {
					fail(err)
				}
			case <-done:
			}
		}()
	}
	return true, nil
}

// status joins what the cluster answered to each request.
func (q *provisioned) status(ctx context.Context) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var parts []string
	for _, p := range q.provs {
		if st := p.Status(ctx); st != "" {
			parts = append(parts, st)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("asked the cluster for %d new %s: %s", q.asked, plural(q.asked, "slice", "slices"), strings.Join(parts, "; "))
}

func (q *provisioned) close(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var errs []error
	for _, p := range q.provs {
		errs = append(errs, p.Close(ctx))
	}
	q.provs = nil
	if q.done != nil {
		select {
		case <-q.done:
		default:
			close(q.done)
		}
	}
	return errors.Join(errs...)
}

// reserveProvisioned asks pr for short new slices (none if short is 0)
// and then waits in the shape's queue (with the wait newWait makes) as
// awaitSlices does; whenever a claim finds slices held by another driver,
// it asks for as many more as the request is then short of. Every
// provisioning is closed on every path, and a request that gives up says
// what the cluster answered. tried is false when pr does not provision
// (errors.ErrUnsupported) and short was not 0: the caller goes on as
// without a Provisioner. b.mu is held on entry and released on return.
func (rt *Runtime) reserveProvisioned(ctx context.Context, op string, pr Provisioner, req *backend.SliceRequest, short int, newWait func(*shapePool) *sliceWait) (r *backend.SliceReservation, err error, tried bool) {
	rt.mu.Unlock()
	// A provisioning that fails for good (ProvisioningFailer) ends the
	// wait at once, with its error.
	parent := ctx
	ctx, failWait := context.WithCancelCause(ctx)
	defer failWait(nil)
	q := &provisioned{pr: pr, fail: func(err error) { failWait(&provisionFailed{err}) }, done: make(chan struct{})}
	q.req.Name = req.Name
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), provisionCloseTimeout)
		defer cancel()
		if cerr := q.close(cctx); cerr != nil {
			rt.log.Warn("cluster: withdrawing the capacity request failed", "op", op, "err", cerr)
		}
	}()
	rt.mu.Lock()
	if err := rt.precheck(op); err != nil {
		rt.mu.Unlock()
		return nil, err, true
	}
	w := newWait(nil)
	q.req.Shape = w.shape
	rt.mu.Unlock()
	if short > 0 {
		on, err := q.ask(ctx, short)
		switch {
		case !on:
			return nil, nil, false
		case err != nil:
			return nil, backend.Wrap(backend.CodeOf(err), op, err), true
		}
	}
	w.status = q.status
	w.onHeld = func(short int) {
		if _, err := q.ask(ctx, short); err != nil {
			rt.log.Warn("cluster: asking for capacity failed", "op", op, "err", err)
		}
	}
	rt.mu.Lock()
	if err := rt.precheck(op); err != nil {
		rt.mu.Unlock()
		return nil, err, true
	}
	p := rt.slices.poolFor(w.shape)
	r, err = rt.awaitSlices(ctx, op, p, w)
	var pf *provisionFailed
	if err != nil && parent.Err() == nil && errors.As(context.Cause(ctx), &pf) {
		return nil, backend.Wrap(backend.CodeOf(pf.err), op, pf.err), true
	}
	if err != nil && ctx.Err() != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		status := q.status(sctx)
		cancel()
		var be *backend.Error
		if status != "" && errors.As(err, &be) {
			be.Err = fmt.Errorf("%w; %s", be.Err, status)
		}
	}
	return r, err, true
}

// provisionFailed is the cause of a reservation's wait ended by a
// provisioning that failed for good.
type provisionFailed struct{ err error }

func (e *provisionFailed) Error() string { return e.err.Error() }
