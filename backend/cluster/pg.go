package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

type pgState int

const (
	pgPending pgState = iota
	pgCreated
	pgRemoved
)

var pgStateNames = [...]string{"PENDING", "CREATED", "REMOVED"}

type pgroup struct {
	id      backend.PlacementGroupID
	spec    *backend.PlacementGroupSpec
	state   pgState
	bundles []*bundle
	// ready is closed once the group is placed or removed (readyOK); it
	// is made when someone waits for it (readyChan), which most groups,
	// placed at once, never need.
	ready   chan struct{}
	readyOK bool
	seq     uint64
	bypass  int
	warn    warnState // when to log that it waits (waitwarn.go)
	// pinned, when set, gives each bundle's only allowed node (TPU slice
	// reservations pin bundles to the hosts of reserved slices).
	pinned []*node
	// slices are the TPU slices a slice reservation holds.
	slices []*tpuSlice
	// classes are the scheduling classes pinned to the group.
	classes []*class
	// lost, when set, is the Unavailable error of a slice reservation
	// that lost a host: all its work failed with it, nothing more runs in
	// it, and it stays broken until removed (see breakSliceGroup).
	lost error
	// claim, when set, is the granted slice claim of a slice reservation
	// (claim.go), ended when the slices are released.
	claim *claimHold
}

type bundle struct {
	pg      *pgroup
	index   int
	demand  []int64
	sel     nodeMatcher
	env     map[string]string
	node    *node
	free    []int64
	chips   uint64   // the TPU chips of node it holds (chips.go)
	running *taskSet // made on the first task, as most bundles run none
	actors  map[*actor]struct{}
}

func (pg *pgroup) signal() {
	if !pg.readyOK {
		pg.readyOK = true
		if pg.ready != nil {
			close(pg.ready)
		}
	}
}

// readyChan returns the channel closed by the next signal, made if need
// be (closed already if signalled). b.mu must be held.
func (pg *pgroup) readyChan() chan struct{} {
	if pg.ready == nil {
		pg.ready = make(chan struct{})
		if pg.readyOK {
			close(pg.ready)
		}
	}
	return pg.ready
}

// onePG is a group of one bundle, in one allocation.
type onePG struct {
	pg  pgroup
	bu  [1]bundle
	bus [1]*bundle
}

// failRequest fails a request that can never run. b.mu must be held.
func (rt *Runtime) failRequest(t *task, err error) {
	if a := t.actorOf(); a != nil {
		rt.killActorLocked(a, err, false)
		return
	}
	t.state = stateDone
	rt.completeLocked(t.obj, backend.Value{}, err)
}

// CreatePlacementGroup implements backend.Backend.
func (rt *Runtime) CreatePlacementGroup(ctx context.Context, spec *backend.PlacementGroupSpec) (backend.PlacementGroupID, error) {
	op := "create placement group"
	if spec.Name != "" {
		op += " " + spec.Name
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	// Validation and compiling selectors cost as much as the spec is
	// large: they happen before the lock; the resource names, which nodes
	// joining add to, are read under it.
	pg, err := rt.newPG(op, spec)
	if err != nil {
		return 0, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck(op); err != nil {
		return 0, err
	}
	if err := rt.pgDemands(op, pg); err != nil {
		return 0, err
	}
	pg.id = backend.PlacementGroupID(rt.newID())
	if err := rt.pgFeasible(op, pg); err != nil {
		return 0, err
	}
	rt.queuePG(pg)
	return pg.id, nil
}

// newPG validates a spec and builds an unplaced group without an ID or
// demands (pgDemands). It reads nothing of the runtime's, so b.mu need
// not be held.
func (rt *Runtime) newPG(op string, spec *backend.PlacementGroupSpec) (*pgroup, error) {
	if err := spec.Validate(op); err != nil {
		return nil, err
	}
	var pg *pgroup
	var bundles []bundle
	if len(spec.Bundles) == 1 {
		one := &onePG{}
		pg, bundles = &one.pg, one.bu[:]
		pg.bundles = one.bus[:]
	} else {
		pg = &pgroup{}
		bundles = make([]bundle, len(spec.Bundles))
		pg.bundles = make([]*bundle, len(spec.Bundles))
	}
	pg.spec = spec
	for i, bs := range spec.Bundles {
		m, err := bs.LabelSelector.Compile()
		if err != nil {
			return nil, backend.Reop(backend.InvalidArgument, fmt.Sprintf("%s: bundle %d", op, i), err)
		}
		bu := &bundles[i]
		*bu = bundle{pg: pg, index: i, sel: nodeMatcher{Matcher: m}, env: bs.Env}
		pg.bundles[i] = bu
	}
	return pg, nil
}

// pgDemands checks the bundles' resources against the cluster's names and
// sets their demand vectors and slices. b.mu must be held.
func (rt *Runtime) pgDemands(op string, pg *pgroup) error {
	for i, bu := range pg.bundles {
		res := pg.spec.Bundles[i].Resources
		// The usual bundle passes in one pass; the checks below say
		// what is wrong with one that does not.
		if !rt.noLooseChips || res[backend.TPU] == 0 {
			if v, slice, ok := rt.bundleDemand(res); ok {
				bu.demand, bu.sel.slice = v, slice
				continue
			}
		}
		// The bundle's operation name is made only for an error.
		bop := func(err error) error {
			return backend.Reop(backend.CodeOf(err), fmt.Sprintf("%s: bundle %d", op, i), err)
		}
		if err := rt.checkResources(op, res); err != nil {
			return bop(err)
		}
		slice, err := rt.demandSlice(op, res)
		if err != nil {
			return bop(err)
		}
		if rt.noLooseChips && res[backend.TPU] > 0 {
			return bop(looseChipsErr(op, res))
		}
		// The demand's spare capacity is the bundle's free vector
		// (placePG): one allocation for both.
		bu.demand, bu.sel.slice = rt.vectorSpare(res, len(rt.resNames)), slice
	}
	return nil
}

func (rt *Runtime) queuePG(pg *pgroup) {
	rt.pgs[pg.id] = pg
	rt.seq++
	pg.seq = rt.seq
	rt.pendingPGs = append(rt.pendingPGs, pg)
	rt.schedule()
}

// pgFeasible checks the group against the capacity of live nodes, as if the
// cluster were idle, and says why it could never be placed.
func (rt *Runtime) pgFeasible(op string, pg *pgroup) error {
	for _, bu := range pg.bundles {
		ok := false
		for _, n := range rt.nodes {
			if n.couldRun() && bu.sel.matches(n) && fits(bu.demand, n.capac) {
				ok = true
				break
			}
		}
		if !ok {
			return backend.Errorf(backend.Infeasible, op, "bundle %d %s fits no live node%s: %s",
				bu.index, rt.resourcesOf(bu.demand, bu.sel.slice), selPhrase(selString(pg.spec.Bundles[bu.index].LabelSelector)), rt.describeCapacity(bu.sel))
		}
	}
	if _, ok := rt.solvePG(pg, func(n *node) []int64 { return n.capac }, nil); !ok {
		switch pg.spec.Strategy {
		case backend.StrictPack:
			total := make([]int64, len(rt.resNames))
			slice := pg.bundles[0].sel.slice
			for _, bu := range pg.bundles {
				add(total, bu.demand)
				if bu.sel.slice != slice {
					slice = ""
				}
			}
			return backend.Errorf(backend.Infeasible, op, "STRICT_PACK needs one node holding all %d bundles, %s in total; no live node is that large", len(pg.bundles), rt.resourcesOf(total, slice))
		case backend.StrictSpread:
			return backend.Errorf(backend.Infeasible, op, "STRICT_SPREAD needs %d distinct nodes, one per bundle; the live nodes that fit the bundles are too few", len(pg.bundles))
		default:
			return backend.Errorf(backend.Infeasible, op, "the %d bundles do not fit the live nodes even when idle", len(pg.bundles))
		}
	}
	return nil
}

// placePG tries to place every unplaced bundle of pg at once, taking the
// resources only if all fit. b.mu must be held.
func (rt *Runtime) placePG(pg *pgroup, bl []blocker) bool {
	assign, ok := rt.solvePG(pg, rt.availForBundles(pg), func(n *node) bool {
		return len(bl) > 0 && rt.blocks(bl, n)
	})
	if !ok {
		return false
	}
	for i, n := range assign {
		bu := pg.bundles[i]
		if bu.node != nil {
			continue
		}
		sub(n.free, bu.demand)
		bu.node = n
		bu.free = bu.freeVector()
		bu.chips = n.takeChips(chipsOf(n, bu.demand))
		bu.env = admission.OverlayEnv(pg.spec.Bundles[i].Env, chipEnv(n, bu.chips))
		n.addBundle(bu)
	}
	pg.state = pgCreated
	pg.signal()
	return true
}

// solvePG finds a node for every bundle of pg under its strategy, given
// each node's available amounts (a [pgSolver]). Placed bundles keep their
// nodes. It returns the node of every bundle.
func (rt *Runtime) solvePG(pg *pgroup, avail func(*node) []int64, skip func(*node) bool) ([]*node, bool) {
	s := pgSolver{nodes: rt.nodes, nres: len(rt.resNames), pg: pg, avail: avail, skip: skip}
	return s.solve()
}

func sum(v []int64) int64 {
	var s int64
	for _, q := range v {
		s += q
	}
	return s
}

// couldUse reports whether some unplaced bundle could ever use node n.
func (pg *pgroup) couldUse(n *node) bool {
	for i, bu := range pg.bundles {
		if bu.node != nil {
			continue
		}
		if pg.pinned != nil {
			if pg.pinned[i] == n {
				return true
			}
			continue
		}
		if bu.sel.matches(n) && fits(bu.demand, n.capac) {
			return true
		}
	}
	return false
}

// PlacementGroupReady implements backend.Backend.
func (rt *Runtime) PlacementGroupReady(ctx context.Context, id backend.PlacementGroupID) error {
	for {
		rt.mu.Lock()
		if err := rt.precheck("wait for placement group"); err != nil {
			rt.mu.Unlock()
			return err
		}
		pg := rt.pgs[id]
		if pg == nil {
			rt.mu.Unlock()
			if err, removed := rt.removedPG(id); removed {
				return err
			}
			return admission.PlacementGroupNotFound("wait for placement group", id)
		}
		if pg.lost != nil {
			rt.mu.Unlock()
			return pg.lost
		}
		switch pg.state {
		case pgCreated:
			rt.mu.Unlock()
			return nil
		case pgRemoved:
			rt.mu.Unlock()
			return admission.PlacementGroupRemovedError(id)
		}
		ch := pg.readyChan()
		rt.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RemovePlacementGroup implements backend.Backend.
func (rt *Runtime) RemovePlacementGroup(ctx context.Context, id backend.PlacementGroupID) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck("remove placement group"); err != nil {
		return err
	}
	pg := rt.pgs[id]
	if pg == nil {
		if _, removed := rt.removedPG(id); removed {
			return nil
		}
		return admission.PlacementGroupNotFound("remove placement group", id)
	}
	rt.removePGLocked(pg)
	return nil
}

func (rt *Runtime) removePGLocked(pg *pgroup) {
	if pg.state == pgRemoved {
		return
	}
	pg.state = pgRemoved
	pg.signal()
	delete(rt.pgs, pg.id)
	// A slice reservation broken by a lost host keeps that cause: work
	// pinned to it fails with the Unavailable error naming the host,
	// before and after the release. A plain removal keeps nil, for which
	// removedPG makes the removal error when it is asked for.
	rt.removedPGs.add(pg.id, pg.lost)
	var err error
	for _, bu := range pg.bundles {
		if err == nil && (bu.running.len() > 0 || len(bu.actors) > 0) {
			err = admission.PlacementGroupRemovedError(pg.id)
		}
		for _, t := range bu.running.snapshot() {
			rt.abortTask(t, err, false)
		}
		for a := range bu.actors {
			rt.killActorLocked(a, backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "%w", err), false)
		}
		if bu.node != nil {
			if bu.node.alive {
				add(bu.node.free, bu.demand)
				bu.node.putChips(bu.chips)
			}
			bu.chips = 0
			delete(bu.node.bundles, bu)
			rt.hostMaybeIdle(bu.node)
			if bu.node.draining {
				rt.drainLater(bu.node)
			}
			bu.node = nil
		}
	}
	// Fail queued work pinned to the group and forget its classes.
	for _, c := range pg.classes {
		if err == nil && c.len() > 0 {
			err = admission.PlacementGroupRemovedError(pg.id)
		}
		for c.len() > 0 {
			t := c.peek()
			c.pop()
			rt.queued--
			rt.failRequest(t, err)
		}
		delete(rt.classes, c.key)
	}
	pg.classes = nil
	if i := slices.Index(rt.pendingPGs, pg); i >= 0 {
		rt.pendingPGs = slices.Delete(rt.pendingPGs, i, i+1)
	}
	rt.releaseSlices(pg)
	rt.schedule()
}

func selString(s backend.LabelSelector) string {
	if len(s) == 0 {
		return ""
	}
	return s.String()
}

// freeVector returns a copy of bu.demand for its free amounts: in the
// demand's spare capacity when it has it (pgDemands), else new.
func (bu *bundle) freeVector() []int64 {
	n := len(bu.demand)
	if cap(bu.demand) >= 2*n {
		free := bu.demand[n : 2*n : 2*n]
		copy(free, bu.demand)
		return free
	}
	return slices.Clone(bu.demand)
}

// bundleDemand is what pgDemands makes of a bundle's resources, in one
// pass: the demand vector (with spare capacity for the free vector), and
// the TPU slice it names. ok is false when a check fails (an invalid
// amount, a name no node has, two slices): pgDemands' checks then say
// which. b.mu must be held.
func (rt *Runtime) bundleDemand(res backend.Resources) (v []int64, slice string, ok bool) {
	n := len(rt.resNames)
	v = make([]int64, n, 2*n)
	for k, x := range res {
		if k == "" || !backend.ValidAmount(x) {
			return nil, "", false
		}
		i, known := rt.resIndex[k]
		if !known {
			if x > 0 {
				return nil, "", false
			}
			continue
		}
		if i == sliceCol && x != 0 {
			if slice != "" && slice != k {
				return nil, "", false
			}
			slice = k
		}
		v[i] = backend.Quantize(x)
	}
	return v, slice, true
}
