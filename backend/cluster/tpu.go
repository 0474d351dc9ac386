package cluster

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// tpuSlice is a TPU slice of the cluster, grouped from its hosts' TPUHost.
type tpuSlice struct {
	index      int // order of creation, for first-fit
	name       string
	shape      tpu.SliceShape
	key        string
	hosts      []*node
	dead       int // hosts not alive
	reservedBy *pgroup
	claiming   bool                // picked for a reservation whose claim is in flight (claim.go)
	subBusy    map[int]bool        // workers of sub-slices whose claim is in flight (subslice.go)
	held       bool                // held by another driver, as its last claim said (claim.go)
	heapPos    int                 // position in its shape's free heap, or -1
	env        []map[string]string // single-slice worker env per host, built once
	names      []string            // host names in worker order, built once
}

func (s *tpuSlice) hostNames() []string {
	if s.names == nil {
		for _, h := range s.hosts {
			s.names = append(s.names, h.name)
		}
	}
	return s.names
}

// workerEnv returns the TPU worker env of host wid when the slice's hosts
// are reached by hostnames; the map is shared and must not be modified.
// The env for the node names is built once.
func (s *tpuSlice) workerEnv(wid int, hostnames []string) map[string]string {
	build := func(i int) map[string]string {
		// Cannot fail: the shape is the slice's (validated when its hosts
		// were indexed), i is one of its hosts and hostnames holds one
		// checked name per host (Runtime.hostNames).
		env, _ := tpu.WorkerEnv(s.shape, s.name, hostnames, i)
		return tpu.NodeEnv(env, s.hosts[i].labels)
	}
	if !slices.Equal(hostnames, s.hostNames()) {
		return build(wid)
	}
	if s.env == nil {
		s.env = make([]map[string]string, len(s.hosts))
		for i := range s.hosts {
			s.env[i] = build(i)
		}
	}
	return s.env[wid]
}

func (s *tpuSlice) idle() bool {
	if s.unavailable() || len(s.subBusy) > 0 {
		return false
	}
	for _, n := range s.hosts {
		if n.hold != nil || !slices.Equal(n.free, n.capac) {
			return false
		}
	}
	return true
}

// unavailable reports whether the slice cannot be reserved now: a host is
// down, it is reserved, being claimed, or held by another driver.
func (s *tpuSlice) unavailable() bool {
	return s.dead > 0 || s.reservedBy != nil || s.claiming || s.held
}

// shapePool holds the slices of one shape and the queue of requests for it.
type shapePool struct {
	key     string
	shape   tpu.SliceShape
	all     []*tpuSlice
	free    sliceHeap // unreserved slices, lowest index first
	waiting []*sliceWait
}

type sliceHeap []*tpuSlice

func (h sliceHeap) Len() int           { return len(h) }
func (h sliceHeap) Less(i, j int) bool { return h[i].index < h[j].index }
func (h sliceHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapPos, h[j].heapPos = i, j
}
func (h *sliceHeap) Push(x any) {
	s := x.(*tpuSlice)
	s.heapPos = len(*h)
	*h = append(*h, s)
}
func (h *sliceHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapPos = -1
	return s
}

// sliceIndex tracks the TPU slices of the cluster by shape.
type sliceIndex struct {
	pools  map[string]*shapePool
	order  []*shapePool
	byNode map[*node]*tpuSlice
	all    []*tpuSlice
	// subs are the granted sub-slice reservations (subslice.go).
	subs map[*pgroup]*subHold
	// pending are the slices not all of whose hosts are in yet.
	pending map[string]*pendingSlice
	names   map[string]bool // of the slices in all
}

// sliceWait is a queued reservation: of n whole slices, or of one
// sub-slice when sub is set.
type sliceWait struct {
	req     *backend.SliceRequest
	n       int
	sub     tpu.Subslice
	shape   tpu.SliceShape
	demand  []int64 // per bundle
	perHost int
	res     backend.Resources
	since   time.Time // when it was queued
	done    chan struct{}
	result  *backend.SliceReservation
	picked  []*tpuSlice // to claim (claim.go); set with done closed
	// pickedSub is the slice of sub-slice pickedIndex to claim
	// (subslice.go); set with done closed.
	pickedSub   *tpuSlice
	pickedIndex int
	// onHeld, if set, is called without b.mu when a claim found slices
	// held by another driver, with how many intact idle slices the
	// request is now short of (provision.go).
	onHeld func(short int)
	// warn is when to log that it waits (waitwarn.go).
	warn warnState
	// status, if set, says what the cluster answered to a request for
	// capacity for it (provision.go); called without b.mu.
	status func(ctx context.Context) string
}

func shapeKey(s tpu.SliceShape) string {
	return s.Generation.String() + "/" + s.Topology.String() + "/" + strconv.Itoa(s.ChipsPerHost)
}

func newSliceIndex() *sliceIndex {
	return &sliceIndex{pools: map[string]*shapePool{}, byNode: map[*node]*tpuSlice{}, subs: map[*pgroup]*subHold{}, pending: map[string]*pendingSlice{}, names: map[string]bool{}}
}

// pendingSlice is a slice some of whose hosts have been reported.
type pendingSlice struct {
	shape tpu.SliceShape
	hosts []*node // by worker ID; nil while absent
	have  int
}

// addHost adds a new node to the slice of its TPUHost, if any; the
// slice joins the index once all its hosts are in. Hosts whose TPUHost
// does not make a slice are logged and left out of the index (CheckSlices
// reports the same as errors). b.mu must be held.
func (x *sliceIndex) addHost(b *Runtime, n *node) {
	if n.spec.TPU == nil {
		return
	}
	name := n.spec.TPU.Slice
	shape, wid, err := hostSlice(n.spec)
	if err == nil && x.named(name) {
		err = fmt.Errorf("TPU slice %q is complete; node %q cannot join it", name, n.name)
	}
	p := x.pending[name]
	switch {
	case err != nil:
	case p == nil:
		p = &pendingSlice{shape: shape, hosts: make([]*node, shape.Hosts())}
		x.pending[name] = p
	case p.shape != shape:
		err = fmt.Errorf("TPU slice %q mixes shapes: node %q is %s, others %s", name, n.name, shape, p.shape)
	case p.hosts[wid] != nil:
		err = fmt.Errorf("TPU slice %q: nodes %q and %q are both worker %d", name, p.hosts[wid].name, n.name, wid)
	}
	if err != nil {
		b.log.Warn("cluster: node left out of the TPU slice index", "node", n.name, "cause", err)
		return
	}
	p.hosts[wid] = n
	p.have++
	if p.have < len(p.hosts) {
		return
	}
	delete(x.pending, name)
	key := shapeKey(shape)
	pool := x.pools[key]
	if pool == nil {
		pool = &shapePool{key: key, shape: shape}
		x.pools[key] = pool
		x.order = append(x.order, pool)
	}
	s := &tpuSlice{index: len(x.all), name: name, shape: shape, key: key, heapPos: -1, hosts: p.hosts}
	for _, h := range p.hosts {
		x.byNode[h] = s
		if !h.alive {
			s.dead++
		}
	}
	pool.all = append(pool.all, s)
	heap.Push(&pool.free, s)
	x.all = append(x.all, s)
	x.names[name] = true
	if b.started {
		b.serveSlices(pool)
	}
}

func (x *sliceIndex) named(name string) bool { return x.names[name] }

// describeShapes lists what slices the cluster has, for errors.
// sameTopology returns the shape of a pool of the cluster with shape's
// generation and topology but other chips per host, or nil.
func (x *sliceIndex) sameTopology(shape tpu.SliceShape) *tpu.SliceShape {
	for _, p := range x.order {
		if len(p.all) > 0 && p.shape.Generation == shape.Generation && p.shape.Topology.String() == shape.Topology.String() &&
			chipsPerHost(p.shape) != chipsPerHost(shape) {
			return &p.shape
		}
	}
	return nil
}

func hostCount(n int) string {
	if n == 1 {
		return "1 host"
	}
	return strconv.Itoa(n) + " hosts"
}

// chipsPerHost is a shape's chips per host, its generation's default if
// unset.
func chipsPerHost(s tpu.SliceShape) int {
	if s.ChipsPerHost != 0 {
		return s.ChipsPerHost
	}
	return s.Generation.DefaultChipsPerHost(s.Topology)
}

func (x *sliceIndex) describeShapes() string {
	if len(x.order) == 0 {
		return "the cluster has no TPU slices"
	}
	parts := make([]string, 0, len(x.order))
	for _, p := range x.order {
		if len(p.all) > 0 { // pools made for provisioning may be empty
			parts = append(parts, fmt.Sprintf("%d × %s", len(p.all), p.shape))
		}
	}
	if len(parts) == 0 {
		return "the cluster has no TPU slices"
	}
	return "the cluster has " + strings.Join(parts, ", ")
}

// ReserveSlices implements backend.SliceReserver: it reserves NumSlices
// whole, intact, idle slices of one shape in one step, placing a placement
// group whose bundles are pinned to their hosts, or waits first come, first
// served until it can.
func (rt *Runtime) ReserveSlices(ctx context.Context, req *backend.SliceRequest) (*backend.SliceReservation, error) {
	op := backend.ReserveSlicesOp(req.Name)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rr, err := req.Resolve(op)
	if err != nil {
		return nil, err
	}
	if rr.Subslice.Count() > 0 {
		return rt.reserveSubslice(ctx, op, req, rr)
	}
	shape, n, res, perHost := rr.Shape, rr.NumSlices, rr.BundleResources, rr.BundlesPerHost
	rt.mu.Lock()
	if err := rt.precheck(op); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	if err := cmp.Or(rt.checkResources(op, res), rt.refuseSliceNames(op, res)); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	p := rt.slices.pools[shapeKey(shape)]
	pr, _ := rt.source.(Provisioner)
	if pr != nil && n > p.intactIdle() {
		if p != nil && len(p.all) > 0 {
			if err := rt.hostFitError(op, p, rt.vector(res), perHost, res, shape); err != nil {
				rt.mu.Unlock()
				return nil, err
			}
		}
		// b.mu is released by reserveProvisioned.
		r, err, tried := rt.reserveProvisioned(ctx, op, pr, req, n-p.intactIdle(), func(p *shapePool) *sliceWait {
			return &sliceWait{req: req, n: n, shape: shape, demand: rt.vector(res), perHost: perHost, res: res, since: time.Now(), done: make(chan struct{})}
		})
		if tried {
			return r, err
		}
		rt.mu.Lock()
		if err := rt.precheck(op); err != nil {
			rt.mu.Unlock()
			return nil, err
		}
		p = rt.slices.pools[shapeKey(shape)]
		pr = nil
	}
	if p == nil || len(p.all) < n {
		have := 0
		if p != nil {
			have = len(p.all)
		}
		shapes := rt.slices.describeShapes()
		if have == 0 {
			if other := rt.slices.sameTopology(shape); other != nil {
				rt.mu.Unlock()
				return nil, backend.Errorf(backend.Infeasible, op,
					"want %d × %s %s with %d chips per host (%s), but the cluster's %s %s slices have %d chips per host (%s): ask for ChipsPerVM %d (ray.SliceSpec.ChipsPerVM, train.ScalingConfig.ChipsPerHost) (%s)",
					n, shape.Generation, shape.Topology, chipsPerHost(shape), hostCount(shape.Hosts()), shape.Generation, shape.Topology,
					chipsPerHost(*other), hostCount(other.Hosts()), chipsPerHost(*other), shapes)
			}
			rt.mu.Unlock()
			return nil, backend.Errorf(backend.Infeasible, op, "want %d × %s but the cluster has no slice of that shape (%s)", n, shape, shapes)
		}
		rt.mu.Unlock()
		return nil, backend.Errorf(backend.Infeasible, op, "want %d × %s but the cluster has only %d of that shape (%s)", n, shape, have, shapes)
	}
	demand := rt.vector(res)
	if err := rt.hostFitError(op, p, demand, perHost, res, shape); err != nil {
		rt.mu.Unlock()
		return nil, err
	}
	w := &sliceWait{req: req, n: n, shape: shape, demand: demand, perHost: perHost, res: res, since: time.Now(), done: make(chan struct{})}
	if pr != nil {
		// Enough slices now, but if other drivers hold some, ask for more.
		r, err, _ := rt.reserveProvisioned(ctx, op, pr, req, 0, func(*shapePool) *sliceWait { return w })
		return r, err
	}
	return rt.awaitSlices(ctx, op, p, w)
}

// hostFitError is the Infeasible error of perHost bundles of demand that
// do not fit one host of pool p's shape, or nil. b.mu must be held.
func (rt *Runtime) hostFitError(op string, p *shapePool, demand []int64, perHost int, res backend.Resources, shape tpu.SliceShape) error {
	// A stack buffer: the head resources make the vectors a little longer
	// than the compiler stack-allocates on its own.
	var buf [16]int64
	var perHostTotal []int64
	if len(demand) <= len(buf) {
		perHostTotal = buf[:len(demand)]
	} else {
		perHostTotal = make([]int64, len(demand))
	}
	for range perHost {
		add(perHostTotal, demand)
	}
	if fits(perHostTotal, p.all[0].hosts[0].capac) {
		return nil
	}
	has := rt.resourcesOf(p.all[0].hosts[0].capac, p.all[0].hosts[0].slice)
	return backend.Errorf(backend.Infeasible, op, "%d bundles of %s do not fit a %s host, which has %s", perHost, res, shape, has)
}

// awaitSlices queues w (whole slices or a sub-slice) on pool p and waits
// until it is granted, claiming what serveSlices picked outside the lock
// when the source is a SliceClaimer, or until ctx ends or the runtime
// closes; nothing stays queued or reserved when it gives up. b.mu is held
// on entry and released on return.
func (rt *Runtime) awaitSlices(ctx context.Context, op string, p *shapePool, w *sliceWait) (*backend.SliceReservation, error) {
	p.waiting = append(p.waiting, w)
	rt.serveSlices(p)
	rt.mu.Unlock()
	for {
		select {
		case <-w.done:
		case <-ctx.Done():
		case <-rt.closedCh:
		}
		rt.mu.Lock()
		claim := rt.claimPicked // claim.go
		if w.pickedSub != nil {
			claim = rt.claimSubslice // subslice.go
		} else if w.picked == nil {
			break
		}
		r, err, again := claim(ctx, op, p, w)
		short := 0
		if again && w.onHeld != nil {
			short = w.n - p.intactIdle()
		}
		rt.mu.Unlock()
		if !again {
			return r, err
		}
		if short > 0 {
			w.onHeld(short)
		}
	}
	defer rt.mu.Unlock()
	if w.result == nil {
		// Not granted: leave the queue holding nothing.
		ahead := slices.Index(p.waiting, w)
		if ahead >= 0 {
			p.waiting = slices.Delete(p.waiting, ahead, ahead+1)
		}
		if rt.closed {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
		}
		err := gaveUp(op, p, w, ahead, ctx.Err())
		rt.serveSlices(p) // a large request leaving may unblock smaller ones
		return nil, err
	}
	if ctx.Err() != nil || rt.closed {
		// Granted as the caller gave up: release, so nothing leaks.
		if pg := rt.pgs[w.result.Group]; pg != nil {
			rt.removePGLocked(pg)
		}
		if rt.closed {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
		}
		return nil, gaveUp(op, p, w, 0, ctx.Err())
	}
	return w.result, nil
}

// gaveUp is the error of a slice request whose context ended while it
// waited: it says what was asked, how long it waited, and how the slices
// of that shape stood (free, busy, broken), and it wraps ctxErr, so
// errors.Is(err, context.DeadlineExceeded) holds and its code is
// DeadlineExceeded (or Canceled). ahead is how many requests for the shape
// were queued before it. b.mu must be held.
func gaveUp(op string, p *shapePool, w *sliceWait, ahead int, ctxErr error) error {
	return backend.Errorf(backend.CodeOf(ctxErr), op, "gave up after %v waiting for %s: %s: %w",
		time.Since(w.since).Round(time.Millisecond), askedSlices(w), slicePoolPhrase(p, ahead), ctxErr)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// serveSlices grants queued requests of a shape in order while slices are
// free; the first request that cannot be granted holds back the rest, so a
// multislice request is not starved by single-slice ones, nor a whole
// slice by sub-slices. b.mu must be held.
func (rt *Runtime) serveSlices(p *shapePool) {
	for len(p.waiting) > 0 && !rt.closed {
		w := p.waiting[0]
		if w.sub.Count() > 0 {
			s, index := rt.pickSubslice(p, w.sub)
			if s == nil {
				return
			}
			p.waiting = p.waiting[1:]
			if rt.claimer != nil {
				// The waiter claims it outside the lock (subslice.go).
				s.setSubBusy(w.sub, index, true)
				w.pickedSub, w.pickedIndex = s, index
			} else {
				w.result = rt.grantSubslice(w, subsliceGrantOf(w, s, index, nil), 0)
			}
			close(w.done)
			continue
		}
		picked := rt.pickSlices(p, w.n)
		if picked == nil {
			return
		}
		p.waiting = p.waiting[1:]
		if rt.claimer != nil {
			// The waiter claims them outside the lock (claim.go).
			for _, s := range picked {
				s.claiming = true
			}
			w.picked = picked
		} else {
			w.result = rt.grantSlices(w, picked, 0, nil)
		}
		close(w.done)
	}
}

// pickSlices takes the n lowest-index idle slices out of the free heap, or
// none.
func (rt *Runtime) pickSlices(p *shapePool, n int) []*tpuSlice {
	var picked, skipped []*tpuSlice
	for len(picked) < n && p.free.Len() > 0 {
		s := heap.Pop(&p.free).(*tpuSlice)
		if s.idle() {
			picked = append(picked, s)
		} else {
			skipped = append(skipped, s)
		}
	}
	for _, s := range skipped {
		heap.Push(&p.free, s)
	}
	if len(picked) < n {
		for _, s := range picked {
			heap.Push(&p.free, s)
		}
		return nil
	}
	return picked
}

// grantSlices places a placement group pinned to the hosts of picked
// slices and builds the reservation; id is the group's ID, or 0 for a new
// one; names are the names the hosts are reached by (Runtime.hostNames),
// or nil for the node names. b.mu must be held.
func (rt *Runtime) grantSlices(w *sliceWait, picked []*tpuSlice, id backend.PlacementGroupID, names [][]string) *backend.SliceReservation {
	r, hosts := rt.sliceReservation(w, picked, names)
	rt.counters.sliceGranted(w)
	pg := rt.pinGroup(id, w.req.Name, hosts, r.Env, w.demand, w.res)
	for _, s := range picked {
		s.reservedBy = pg
	}
	pg.slices = picked
	r.Group = pg.id
	return r
}

// sliceReservation builds the reservation of picked slices for w (all but
// its group) and the host of each bundle. b.mu must be held.
func (rt *Runtime) sliceReservation(w *sliceWait, picked []*tpuSlice, names [][]string) (*backend.SliceReservation, []*node) {
	r := &backend.SliceReservation{ChipsPerHost: w.shape.ChipsPerHost, BundlesPerHost: w.perHost, BundleResources: w.res}
	coordinator := ""
	total := len(picked) * len(picked[0].hosts) * w.perHost
	hosts := make([]*node, 0, total)
	r.Env = make([]map[string]string, 0, total)
	r.Slices = make([]backend.ReservedSlice, 0, len(picked))
	for si, s := range picked {
		// Node names are stable for a node's life (Node.Name), so the slices share
		// one read-only list.
		rs := backend.ReservedSlice{Name: s.name, Hosts: s.hostNames(), Hostnames: s.hostNames()}
		if names != nil {
			rs.Hostnames = names[si]
		}
		if si == 0 {
			coordinator = rs.Hostnames[0]
		}
		for wid, h := range s.hosts {
			env := s.workerEnv(wid, rs.Hostnames)
			if len(picked) > 1 {
				// Cannot fail, as in hostEnvOf.
				ms, _ := tpu.MultisliceEnv(coordinator, tpu.DefaultMegascalePort, len(picked), si)
				env = maps.Clone(env)
				maps.Copy(env, ms)
			}
			for j := range w.perHost {
				env := env
				if w.perHost > 1 {
					// Each bundle is its own process: a v7x NUMA process
					// or part of the host (backend.SliceBundleEnv). The
					// shape is valid, so this does not fail; if it did, the
					// bundle would keep the host's env.
					if e, err := backend.SliceBundleEnv(s.shape, s.name, rs.Hostnames, wid, j, w.perHost, coordinator, len(picked), si); err == nil {
						env = tpu.NodeEnv(e, h.labels)
					}
				}
				hosts = append(hosts, h)
				r.Env = append(r.Env, env)
			}
		}
		r.Slices = append(r.Slices, rs)
	}
	return r, hosts
}

// pinGroup creates a created placement group with one bundle per host,
// bundle i pinned to hosts[i] with env envs[i], and takes the bundles'
// demand from the hosts. The group keeps hosts as its pinned list; id is
// its ID, or 0 for a new one. b.mu must be held.
func (rt *Runtime) pinGroup(id backend.PlacementGroupID, name string, hosts []*node, envs []map[string]string, demand []int64, res backend.Resources) *pgroup {
	total := len(hosts)
	if len(demand) < len(rt.resNames) {
		// Resource names were added while the request waited (the hosts
		// of a new slice bring its head and slice-name resources): the
		// bundles' vectors must be as long as every demand built from
		// now on, or a task placed in a bundle would not fit its vector.
		demand = rt.vector(res)
	}
	spec := &backend.PlacementGroupSpec{Name: name, Strategy: backend.StrictSpread, Bundles: make([]backend.Bundle, 0, total)}
	if id == 0 {
		id = backend.PlacementGroupID(rt.newID())
	}
	pg := &pgroup{id: id, spec: spec}
	pg.bundles = make([]*bundle, 0, total)
	pg.pinned = hosts
	bundles := make([]bundle, total)
	free := make([]int64, total*len(demand))
	for i, h := range hosts {
		bu := &bundles[i]
		*bu = bundle{pg: pg, index: i, demand: demand, env: envs[i]}
		spec.Bundles = append(spec.Bundles, backend.Bundle{Resources: res, Env: envs[i]})
		pg.bundles = append(pg.bundles, bu)
		sub(h.free, bu.demand)
		bu.chips = h.takeChips(chipsOf(h, bu.demand)) // the chips envs[i] names
		bu.node = h
		bu.free = free[:len(demand):len(demand)]
		free = free[len(demand):]
		copy(bu.free, bu.demand)
		h.addBundle(bu)
	}
	pg.state = pgCreated
	pg.signal()
	rt.pgs[pg.id] = pg
	rt.seq++
	pg.seq = rt.seq
	return pg
}

// releaseSlices returns the slices of a removed reservation to their free
// heaps and serves waiting requests. b.mu must be held.
func (rt *Runtime) releaseSlices(pg *pgroup) {
	if hold := rt.slices.subs[pg]; hold != nil {
		rt.releaseSubslice(pg, hold)
		return
	}
	ss := pg.slices
	if len(ss) == 0 {
		return
	}
	pg.slices = nil
	if rt.endClaimLocked(pg, func() { rt.freeSlices(ss) }) {
		// The slices come back once the claim has ended (claim.go).
		for _, s := range ss {
			s.reservedBy = nil
			s.claiming = true
		}
		return
	}
	rt.freeSlices(ss)
}

// freeSlices returns released slices to their free heaps and serves
// waiting requests. b.mu must be held.
func (rt *Runtime) freeSlices(ss []*tpuSlice) {
	var pools []*shapePool
	for _, s := range ss {
		s.reservedBy = nil
		s.claiming = false
		p := rt.slices.pools[s.key]
		heap.Push(&p.free, s)
		if !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	for _, p := range pools {
		rt.serveSlices(p)
	}
}

// sliceHostFreed serves waiting requests when a TPU host may have become
// idle. b.mu must be held.
func (rt *Runtime) sliceHostFreed(n *node) {
	if s := rt.slices.byNode[n]; s != nil {
		if p := rt.slices.pools[s.key]; len(p.waiting) > 0 {
			rt.serveSlices(p)
		}
	}
}

func (rt *Runtime) markSliceHostDown(n *node) {
	if s := rt.slices.byNode[n]; s != nil {
		s.dead++
	}
}

func (rt *Runtime) markSliceHostUp(n *node) {
	if s := rt.slices.byNode[n]; s != nil {
		s.dead--
		rt.sliceHostFreed(n)
	}
}

// Slices implements backend.SliceReserver.
func (rt *Runtime) Slices(ctx context.Context) ([]backend.SliceState, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, backend.Errorf(backend.FailedPrecondition, backend.ListSlicesOp, "%w", backend.ErrClosed)
	}
	tpuIdx := rt.resIndex[backend.TPU]
	out := make([]backend.SliceState, 0, len(rt.slices.all))
	for _, s := range rt.slices.all {
		st := backend.SliceState{
			Name: s.name, Generation: s.shape.Generation.String(), Topology: s.shape.Topology.String(),
			ChipsPerHost: s.shape.ChipsPerHost, Intact: s.dead == 0, Idle: s.idle(),
		}
		if s.reservedBy != nil {
			st.ReservedBy, st.ReservedName = s.reservedBy.id, s.reservedBy.spec.Name
		}
		st.Subslices = rt.subsliceStates(s)
		for _, h := range s.hosts {
			chips := int(backend.Dequantize(h.capac[tpuIdx]))
			used := chips - int(backend.Dequantize(h.free[tpuIdx]))
			if s.reservedBy != nil {
				// Chips held by the reservation's bundles count as used.
				used = chips
			}
			st.Hosts = append(st.Hosts, backend.SliceHostState{Node: h.name, Alive: h.alive, Chips: chips, ChipsInUse: used})
		}
		out = append(out, st)
	}
	return out, nil
}

// PendingSliceRequests implements backend.SliceReserver.
func (rt *Runtime) PendingSliceRequests(ctx context.Context) ([]backend.PendingSliceRequest, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, backend.Errorf(backend.FailedPrecondition, backend.ListPendingSlicesOp, "%w", backend.ErrClosed)
	}
	var out []backend.PendingSliceRequest
	for _, p := range rt.slices.order {
		for _, w := range p.waiting {
			out = append(out, backend.PendingSliceRequest{
				Name: w.req.Name, Generation: w.shape.Generation.String(), Topology: w.shape.Topology.String(),
				ChipsPerHost: w.shape.ChipsPerHost, NumSlices: w.n, Since: w.since,
			})
		}
	}
	return out, nil
}

// QueuedSliceRequests returns how many slice reservations are waiting.
func (rt *Runtime) QueuedSliceRequests() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for _, p := range rt.slices.order {
		n += len(p.waiting)
	}
	return n
}
