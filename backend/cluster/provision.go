package cluster

import (
	"context"
	"errors"
	"fmt"
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

// reserveProvisioned asks pr for short new slices of shape and then waits
// in the shape's queue (made by newWait) as awaitSlices does, closing the
// provisioning on every path. tried is false when pr does not provision
// (errors.ErrUnsupported): the caller goes on as without a Provisioner.
// b.mu is held on entry and released on return.
func (b *Runtime) reserveProvisioned(ctx context.Context, op string, req *backend.SliceRequest, pr Provisioner, shape tpu.SliceShape, short int, newWait func(*shapePool) *sliceWait) (r *backend.SliceReservation, err error, tried bool) {
	b.mu.Unlock()
	prov, err := pr.Provision(ctx, ProvisionRequest{Name: req.Name, Shape: shape, NumSlices: short})
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return nil, nil, false
	case err != nil:
		return nil, backend.Wrap(backend.CodeOf(err), op, err), true
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), provisionCloseTimeout)
		defer cancel()
		if cerr := prov.Close(cctx); cerr != nil {
			b.log.Warn("cluster: withdrawing the capacity request failed", "op", op, "err", cerr)
		}
	}()
	b.mu.Lock()
	if err := b.precheck(op); err != nil {
		b.mu.Unlock()
		return nil, err, true
	}
	p := b.slices.poolFor(shape)
	r, err = b.awaitSlices(ctx, op, p, newWait(p))
	if err != nil && ctx.Err() != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		status := prov.Status(sctx)
		cancel()
		var be *backend.Error
		if status != "" && errors.As(err, &be) {
			be.Err = fmt.Errorf("%w; asked the cluster for %d new %s: %s", be.Err, short, plural(short, "slice", "slices"), status)
		}
	}
	return r, err, true
}
