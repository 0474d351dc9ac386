package core

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// subHold is a granted sub-slice reservation: sub-slice index of slice,
// held by a placement group pinned to its hosts. The parent slice stays
// unreserved but is no longer idle, so whole-slice requests pass it by.
type subHold struct {
	slice *tpuSlice
	sub   tpu.Subslice
	index int
	id    string
	pg    *pgroup
}

// SubsliceID is the sub-slice label value (tpu.Subslice.GKELabel) the
// runtime gives sub-slice index of a slice in reservations; sources that
// label hosts for sub-slices (local's TPUSliceSpec.Subslices) use the same.
func SubsliceID(slice string, t tpu.Topology, index int) string {
	return fmt.Sprintf("%s-%s-%d", slice, t, index)
}

// reserveSubslice reserves one sub-slice, as Ray's
// subslice_placement_group does: the first sub-slice, in slice then index
// order, whose hosts are all alive and idle in a slice of the parent shape
// that no whole-slice reservation holds. It queues with the whole-slice
// requests of the parent shape, first come, first served, until one is
// free or ctx ends.
func (b *Runtime) reserveSubslice(ctx context.Context, op string, req *backend.SliceRequest, rr backend.ResolvedSliceRequest) (*backend.SliceReservation, error) {
	b.mu.Lock()
	if err := b.precheck(op); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	if err := b.checkResources(op, rr.BundleResources); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	p := b.slices.pools[shapeKey(rr.Shape)]
	if p == nil {
		shapes := b.slices.describeShapes()
		b.mu.Unlock()
		return nil, backend.Errorf(backend.Infeasible, op, "want %s but the cluster has no %s slice (%s)", rr.Subslice, rr.Shape, shapes)
	}
	demand := b.vector(rr.BundleResources)
	perHostTotal := make([]int64, len(demand))
	for range rr.BundlesPerHost {
		add(perHostTotal, demand)
	}
	if !fits(perHostTotal, p.all[0].hosts[0].capac) {
		has := b.resources(p.all[0].hosts[0].capac)
		b.mu.Unlock()
		return nil, backend.Errorf(backend.Infeasible, op, "%d bundles of %s do not fit a %s host, which has %s", rr.BundlesPerHost, rr.BundleResources, rr.Shape, has)
	}
	w := &sliceWait{req: req, n: 1, sub: rr.Subslice, shape: rr.Shape, demand: demand, perHost: rr.BundlesPerHost, res: rr.BundleResources, done: make(chan struct{})}
	p.waiting = append(p.waiting, w)
	b.serveSlices(p)
	b.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
	case <-b.closedCh:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.result == nil {
		// Not granted: leave the queue holding nothing.
		if i := slices.Index(p.waiting, w); i >= 0 {
			p.waiting = slices.Delete(p.waiting, i, i+1)
		}
		if b.closed {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
		}
		b.serveSlices(p) // requests behind it may fit now
		return nil, ctx.Err()
	}
	if ctx.Err() != nil || b.closed {
		// Granted as the caller gave up: release, so nothing leaks.
		if pg := b.pgs[w.result.Group]; pg != nil {
			b.removePGLocked(pg)
		}
		if b.closed {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
		}
		return nil, ctx.Err()
	}
	return w.result, nil
}

// pickSubslice returns the first free sub-slice of a slice of pool p, or
// nil.
func (b *Runtime) pickSubslice(p *shapePool, sub tpu.Subslice) (*tpuSlice, int) {
	for _, s := range p.all {
		if s.unavailable() {
			continue
		}
		for i := range sub.Count() {
			ws, _ := sub.Workers(i)
			if !slices.ContainsFunc(ws, func(w int) bool {
				h := s.hosts[w]
				return !h.alive || !slices.Equal(h.free, h.capac)
			}) {
				return s, i
			}
		}
	}
	return nil, 0
}

// grantSubslice pins a placement group to the hosts of sub-slice index of
// s, each bundle's env rewritten to the sub-slice as the GKE device plugin
// does. b.mu must be held.
func (b *Runtime) grantSubslice(w *sliceWait, s *tpuSlice, index int) *backend.SliceReservation {
	ws, _ := w.sub.Workers(index)
	id := SubsliceID(s.name, w.sub.Shape.Topology, index)
	rs := backend.ReservedSlice{Name: s.name, Subslice: w.sub.Shape.Topology.String(), SubsliceIndex: index, SubsliceID: id}
	for _, wid := range ws {
		rs.Hosts = append(rs.Hosts, s.hosts[wid].name)
	}
	rs.Hostnames = rs.Hosts
	r := &backend.SliceReservation{ChipsPerHost: w.sub.Shape.ChipsPerHost, BundlesPerHost: w.perHost, BundleResources: w.res, Slices: []backend.ReservedSlice{rs}}
	hosts := make([]*node, 0, len(ws)*w.perHost)
	for sw, wid := range ws {
		for j := range w.perHost {
			// TPU_NAME is the sub-slice's ID: each sub-slice is a slice of
			// its own to libtpu and to Ray's slice labels.
			env, err := backend.SliceBundleEnv(w.sub.Shape, id, rs.Hostnames, sw, j, w.perHost, "", 1, 0)
			if err != nil {
				// The sub-slice shape was validated; fall back to no env
				// rather than fail a granted reservation.
				env = map[string]string{}
			}
			hosts = append(hosts, s.hosts[wid])
			r.Env = append(r.Env, env)
		}
	}
	pg := b.pinGroup(0, w.req.Name, hosts, r.Env, w.demand, w.res)
	b.slices.subs[pg] = &subHold{slice: s, sub: w.sub, index: index, id: id, pg: pg}
	r.Group = pg.id
	return r
}

// subsliceStates reports the sub-slices of s that are reserved, by index.
// b.mu must be held.
func (b *Runtime) subsliceStates(s *tpuSlice) []backend.SubsliceState {
	var out []backend.SubsliceState
	for _, h := range b.slices.subs {
		if h.slice != s {
			continue
		}
		st := backend.SubsliceState{Topology: h.sub.Shape.Topology.String(), Index: h.index, ID: h.id, ReservedBy: h.pg.id}
		ws, _ := h.sub.Workers(h.index)
		for _, w := range ws {
			st.Hosts = append(st.Hosts, s.hosts[w].name)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b backend.SubsliceState) int {
		return cmp.Or(strings.Compare(a.Topology, b.Topology), cmp.Compare(a.Index, b.Index))
	})
	return out
}
