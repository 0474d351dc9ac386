package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/samber/lo"

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
func (rt *Runtime) reserveSubslice(ctx context.Context, op string, req *backend.SliceRequest, rr backend.ResolvedSliceRequest) (*backend.SliceReservation, error) {
	rt.mu.Lock()
	if err := rt.precheck(op); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	if err := cmp.Or(rt.checkResources(op, rr.BundleResources), rt.refuseSliceNames(op, rr.BundleResources)); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	p := rt.slices.pools[shapeKey(rr.Shape)]
	if p == nil {
		shapes := rt.slices.describeShapes()
		rt.mu.Unlock()
		return nil, backend.Errorf(backend.Infeasible, op, "want %s but the cluster has no %s slice (%s)", rr.Subslice, rr.Shape, shapes)
	}
	demand := rt.vector(rr.BundleResources)
	if err := rt.hostFitError(op, p, demand, rr.BundlesPerHost, rr.BundleResources, rr.Shape); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	w := &sliceWait{req: req, n: 1, sub: rr.Subslice, shape: rr.Shape, demand: demand, perHost: rr.BundlesPerHost, res: rr.BundleResources, since: time.Now(), done: make(chan struct{})}
	return rt.awaitSlices(ctx, op, p, w)
}

// pickSubslice returns the first free sub-slice of a slice of pool p, or
// nil: all its hosts alive and idle, none of them in a sub-slice whose
// claim is in flight.
func (rt *Runtime) pickSubslice(p *shapePool, sub tpu.Subslice) (*tpuSlice, int) {
	for _, s := range p.all {
		if s.unavailable() {
			continue
		}
		for i := range sub.Count() {
			ws, _ := sub.Workers(i)
			if !slices.ContainsFunc(ws, func(w int) bool {
				h := s.hosts[w]
				return !h.alive || s.subBusy[w] || h.hold != nil || !slices.Equal(h.free, h.capac)
			}) {
				return s, i
			}
		}
	}
	return nil, 0
}

// setSubBusy marks the hosts of sub-slice index of s as being claimed or
// released (busy), or not. b.mu must be held.
func (s *tpuSlice) setSubBusy(sub tpu.Subslice, index int, busy bool) {
	ws, _ := sub.Workers(index)
	for _, w := range ws {
		if busy {
			if s.subBusy == nil {
				s.subBusy = map[int]bool{}
			}
			s.subBusy[w] = true
		} else {
			delete(s.subBusy, w)
		}
	}
}

// subsliceGrant is a picked sub-slice as its reservation gives it.
type subsliceGrant struct {
	slice *tpuSlice
	index int
	rs    backend.ReservedSlice // its ID and hosts, in sub-slice worker order
	hosts []*node               // each bundle's host
	env   []map[string]string   // each bundle's env
}

// subsliceGrantOf builds the grant of sub-slice index of s for w, each
// bundle's env rewritten to the sub-slice as the GKE device plugin does;
// hostnames are the names its hosts are reached by (Runtime.hostNames),
// or nil for the node names. b.mu must be held.
func subsliceGrantOf(w *sliceWait, s *tpuSlice, index int, hostnames []string) *subsliceGrant {
	ws, _ := w.sub.Workers(index)
	id := SubsliceID(s.name, w.sub.Shape.Topology, index)
	g := &subsliceGrant{slice: s, index: index}
	g.rs = backend.ReservedSlice{Name: s.name, Subslice: w.sub.Shape.Topology.String(), SubsliceIndex: index, SubsliceID: id}
	for _, wid := range ws {
		g.rs.Hosts = append(g.rs.Hosts, s.hosts[wid].name)
	}
	g.rs.Hostnames = g.rs.Hosts
	if hostnames != nil {
		g.rs.Hostnames = hostnames
	}
	for sw, wid := range ws {
		for j := range w.perHost {
			// TPU_NAME is the sub-slice's ID: each sub-slice is a slice of
			// its own to libtpu and to Ray's slice labels.
			env, err := backend.SliceBundleEnv(w.sub.Shape, id, g.rs.Hostnames, sw, j, w.perHost, "", 1, 0)
			if err != nil {
				// The sub-slice shape was validated; fall back to no env
				// rather than fail a granted reservation.
				env = map[string]string{}
			}
			g.hosts = append(g.hosts, s.hosts[wid])
			tpu.NodeEnv(env, s.hosts[wid].labels)
			g.env = append(g.env, env)
		}
	}
	return g
}

// hostEnv returns each host's env (not each bundle's), for
// ClaimRunner.Reserved.
func (g *subsliceGrant) hostEnv(w *sliceWait) map[string]map[string]string {
	out := make(map[string]map[string]string, len(g.rs.Hosts))
	ws, _ := w.sub.Workers(g.index)
	for sw, h := range g.rs.Hosts {
		env, err := tpu.WorkerEnv(w.sub.Shape, g.rs.SubsliceID, g.rs.Hostnames, sw)
		if err != nil {
			env = map[string]string{}
		}
		out[h] = tpu.NodeEnv(env, g.slice.hosts[ws[sw]].labels)
	}
	return out
}

// grantSubslice pins a placement group (id, or a new one for 0) to the
// hosts of g. b.mu must be held.
func (rt *Runtime) grantSubslice(w *sliceWait, g *subsliceGrant, id backend.PlacementGroupID) *backend.SliceReservation {
	r := &backend.SliceReservation{ChipsPerHost: w.sub.Shape.ChipsPerHost, BundlesPerHost: w.perHost, BundleResources: w.res, Slices: []backend.ReservedSlice{g.rs}, Env: g.env}
	pg := rt.pinGroup(id, w.req.Name, g.hosts, r.Env, w.demand, w.res)
	rt.counters.sliceGranted(w)
	rt.slices.subs[pg] = &subHold{slice: g.slice, sub: w.sub, index: g.index, id: g.rs.SubsliceID, pg: pg}
	r.Group = pg.id
	return r
}

// claimSubslice claims, outside b.mu, the sub-slice serveSlices picked for
// w (the source is a SliceClaimer): the parent slice, with the
// sub-slice's hosts in worker order, which the source takes as a claim of
// part of the slice. Then it grants it (claimAndGrant); a HeldError marks
// the parent slice held. b.mu is held on entry and on return.
func (rt *Runtime) claimSubslice(ctx context.Context, op string, p *shapePool, w *sliceWait) (_ *backend.SliceReservation, _ error, again bool) {
	s, index := w.pickedSub, w.pickedIndex
	w.pickedSub = nil
	ws, _ := w.sub.Workers(index)
	hosts := lo.Map(ws, func(wid int, _ int) *node { return s.hosts[wid] })
	id := backend.PlacementGroupID(rt.newID())
	claim := Claim{ID: id.String(), Slices: []string{s.name}, Hosts: [][]string{lo.Map(hosts, func(n *node, _ int) string { return n.name })},
		Handles: [][]any{handlesOf(hosts)}, Subslice: true}
	names, err := rt.hostNames(claim)
	if err != nil {
		s.setSubBusy(w.sub, index, false)
		rt.serveSlices(p)
		return nil, err, false
	}
	g := subsliceGrantOf(w, s, index, names[0])
	pc := &pickedClaim{
		op: op, id: id, claim: claim,
		unpick: func() {
			s.setSubBusy(w.sub, index, false)
			rt.serveSlices(p)
		},
		grant: func() *backend.SliceReservation {
			s.setSubBusy(w.sub, index, false)
			return rt.grantSubslice(w, g, id)
		},
		broken: func() bool { return s.dead > 0 },
	}
	if rt.claimRunner != nil {
		pc.env = g.hostEnv(w)
	}
	return rt.claimAndGrant(ctx, p, w, pc)
}

// releaseSubslice forgets the sub-slice reservation pg held and serves the
// pool; with a claim, its hosts stay busy until the claim has ended
// (claim.go). b.mu must be held.
func (rt *Runtime) releaseSubslice(pg *pgroup, hold *subHold) {
	delete(rt.slices.subs, pg)
	p := rt.slices.pools[hold.slice.key]
	s := hold.slice
	if rt.endClaimLocked(pg, func() {
		s.setSubBusy(hold.sub, hold.index, false)
		rt.serveSlices(p)
	}) {
		s.setSubBusy(hold.sub, hold.index, true)
	}
	rt.serveSlices(p)
}

// subsliceStates reports the sub-slices of s that are reserved, by index.
// b.mu must be held.
func (rt *Runtime) subsliceStates(s *tpuSlice) []backend.SubsliceState {
	var out []backend.SubsliceState
	for _, h := range rt.slices.subs {
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
