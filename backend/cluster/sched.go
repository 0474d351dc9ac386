package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// class groups queued requests with identical demand, selector and
// placement: if the head of a class cannot be placed, neither can the rest,
// so a scheduling pass costs one attempt per class, not per request.
type class struct {
	key     string
	demand  []int64
	sel     nodeMatcher
	selText string
	pl      backend.Placement
	queue   []*task
	head    int
	active  bool

	feasEpoch uint64
	feasErr   error
	res       backend.Resources // demand as a map, shared read-only by runtime infos
	// warn is when to log that the head of the queue waits (waitwarn.go).
	warn warnState
	// swept: dropped from b.classes while idle; a task that still points
	// to it (waiting for its input, or an actor to restart) takes it back
	// when it is queued (enqueue).
	swept bool
}

// minClassSweep is the number of scheduling classes below which idle ones
// are kept for reuse. Above it, idle classes are dropped whenever the count
// doubles since the last sweep, so memory follows the classes in use, not
// every shape ever submitted.
const minClassSweep = 1024

func (c *class) len() int { return len(c.queue) - c.head }

func (c *class) peek() *task { return c.queue[c.head] }

func (c *class) pop() {
	c.queue[c.head] = nil
	c.head++
	if c.head == len(c.queue) {
		c.queue, c.head = c.queue[:0], 0
	}
}

// remove drops t from the queue wherever it is.
func (c *class) remove(t *task) bool {
	for i := c.head; i < len(c.queue); i++ {
		if c.queue[i] == t {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			if c.head == len(c.queue) {
				c.queue, c.head = c.queue[:0], 0
			}
			return true
		}
	}
	return false
}

// classFor finds or creates the class of a request. b.mu must be held.
func (rt *Runtime) classFor(op string, s *backend.Scheduling) (*class, error) {
	if c := rt.lastClass.lookup(s); c != nil {
		return c, nil
	}
	c, err := rt.findClass(op, s)
	if err == nil {
		rt.lastClass.remember(s, c)
	}
	return c, err
}

// findClass is classFor without the cache.
func (rt *Runtime) findClass(op string, s *backend.Scheduling) (*class, error) {
	var buf [96]byte
	key := buf[:0]
	var demand [16]int64
	var vec []int64
	if len(rt.resNames) <= len(demand) {
		vec = demand[:len(rt.resNames)]
	} else {
		vec = make([]int64, len(rt.resNames))
	}
	// One pass validates and converts; the slow checkResources only runs
	// to word the error.
	bad, twoSlices := false, false
	slice := "" // the TPU slice whose resource s asks for (sliceres.go)
	for k, v := range s.Resources {
		if !backend.ValidAmount(v) || k == "" {
			bad = true
			break
		}
		i, ok := rt.resIndex[k]
		if !ok {
			if v > 0 {
				bad = true
				break
			}
			continue
		}
		if i == sliceCol && v != 0 {
			twoSlices = twoSlices || slice != ""
			slice = k
		}
		vec[i] = backend.Quantize(v)
	}
	if bad {
		if err := rt.checkResources(op, s.Resources); err != nil {
			return nil, err
		}
		return nil, backend.Errorf(backend.Internal, op, "resources %v rejected without a reason", s.Resources)
	}
	if twoSlices {
		_, err := rt.demandSlice(op, s.Resources)
		return nil, err
	}
	if rt.noLooseChips && s.Placement.Group == 0 && vec[tpuCol] > 0 {
		return nil, looseChipsErr(op, s.Resources)
	}
	for i, q := range vec {
		if q != 0 {
			key = strconv.AppendInt(key, int64(i), 10)
			key = append(key, ':')
			key = strconv.AppendInt(key, q, 10)
			key = append(key, ';')
		}
	}
	if slice != "" {
		key = append(key, '#')
		key = strconv.AppendInt(key, int64(len(slice)), 10)
		key = append(key, ':')
		key = append(key, slice...)
	}
	selText := ""
	if len(s.NodeSelector) > 0 {
		if err := s.NodeSelector.Validate(); err != nil {
			return nil, backend.Reop(backend.InvalidArgument, op, err)
		}
		selText = s.NodeSelector.String()
		// Length-prefixed pairs: no two selectors share a key.
		for _, k := range slices.Sorted(maps.Keys(s.NodeSelector)) {
			v := s.NodeSelector[k]
			key = append(key, '|')
			key = strconv.AppendInt(key, int64(len(k)), 10)
			key = append(key, ':')
			key = append(key, k...)
			key = strconv.AppendInt(key, int64(len(v)), 10)
			key = append(key, ':')
			key = append(key, v...)
		}
	}
	if s.Placement.Group != 0 {
		key = append(key, '@')
		key = strconv.AppendUint(key, uint64(s.Placement.Group), 10)
		key = append(key, '/')
		key = strconv.AppendInt(key, int64(s.Placement.Bundle), 10)
	}
	if c := rt.classes[string(key)]; c != nil {
		return c, nil
	}
	if len(rt.classes) >= rt.classSweepAt {
		rt.sweepClasses()
	}
	m, err := s.NodeSelector.Compile()
	if err != nil {
		return nil, backend.Reop(backend.InvalidArgument, op, err)
	}
	c := &class{key: string(key), demand: slices.Clone(vec), sel: nodeMatcher{m, slice}, selText: selText, pl: s.Placement, feasEpoch: ^uint64(0)}
	if c.pl.Group == 0 {
		c.pl.Bundle = -1
	} else if pg := rt.pgs[c.pl.Group]; pg != nil {
		pg.classes = append(pg.classes, c)
	}
	rt.classes[c.key] = c
	return c, nil
}

// sweepClasses drops idle classes (nothing queued) and sets the next sweep
// at twice what is left. It costs one pass over the classes, once per
// doubling, so O(1) per class created. b.mu must be held.
func (rt *Runtime) sweepClasses() {
	var groups []*pgroup
	for key, c := range rt.classes {
		if c.len() > 0 || c.active {
			continue
		}
		delete(rt.classes, key)
		c.swept = true
		if pg := rt.pgs[c.pl.Group]; c.pl.Group != 0 && pg != nil && !slices.Contains(groups, pg) {
			groups = append(groups, pg)
		}
	}
	for _, pg := range groups {
		pg.classes = slices.DeleteFunc(pg.classes, func(c *class) bool { return c.swept })
	}
	rt.classSweepAt = max(minClassSweep, 2*len(rt.classes))
}

// readopt returns the live class of a swept class's key, putting c back
// when there is none. b.mu must be held.
func (rt *Runtime) readopt(c *class) *class {
	if cur := rt.classes[c.key]; cur != nil {
		return cur
	}
	c.swept = false
	rt.classes[c.key] = c
	if c.pl.Group != 0 {
		if pg := rt.pgs[c.pl.Group]; pg != nil {
			pg.classes = append(pg.classes, c)
		}
	}
	return c
}

// feasible reports why a class could never be placed, or nil. b.mu must be
// held.
func (rt *Runtime) feasible(op string, c *class) error {
	if c.pl.Group != 0 {
		if pg := rt.pgs[c.pl.Group]; pg != nil && pg.lost != nil {
			return pg.lost
		}
	}
	if c.feasEpoch == rt.epoch {
		return c.feasErr
	}
	c.feasEpoch, c.feasErr = rt.epoch, nil
	if c.pl.Group != 0 {
		pg := rt.pgs[c.pl.Group]
		if pg == nil {
			if err, removed := rt.removedPG(c.pl.Group); removed {
				c.feasErr = err
			} else {
				c.feasErr = admission.PlacementGroupNotFound(op, c.pl.Group)
			}
			return c.feasErr
		}
		if err := admission.CheckBundleIndex(op, pg.id, c.pl.Bundle, len(pg.bundles)); err != nil {
			c.feasErr = err
			return err
		}
		for i, bu := range pg.bundles {
			if (c.pl.Bundle == -1 || c.pl.Bundle == i) && c.sel.within(bu.sel) && fits(c.demand, bu.demand) {
				return nil
			}
		}
		c.feasErr = admission.BundleMisfit(op, rt.resourcesOf(c.demand, c.sel.slice), c.pl.Bundle, pg.id)
		return c.feasErr
	}
	for _, n := range rt.nodes {
		if n.couldRun() && c.sel.matches(n) && fits(c.demand, n.capac) {
			return nil
		}
	}
	c.feasErr = backend.Errorf(backend.Infeasible, op, "no live node can ever hold %s%s: %s",
		rt.resourcesOf(c.demand, c.sel.slice), selPhrase(c.selText), rt.describeCapacity(c.sel))
	// The error is not cached across epochs, so a restarted node makes the
	// class feasible again.
	return c.feasErr
}

func selPhrase(s string) string {
	if s == "" {
		return ""
	}
	return " with node selector " + s
}

// describeCapacity summarises the live nodes a selector matches, for
// infeasibility errors.
func (rt *Runtime) describeCapacity(sel nodeMatcher) string {
	var matching, live, dead int
	var largest []int64
	for _, n := range rt.nodes {
		if !n.couldRun() {
			dead++
			continue
		}
		live++
		if !sel.matches(n) {
			continue
		}
		matching++
		if largest == nil {
			largest = slices.Clone(n.capac)
		} else {
			for i, q := range n.capac {
				largest[i] = max(largest[i], q)
			}
		}
	}
	if live == 0 {
		return fmt.Sprintf("no live node: %d dead", dead)
	}
	if matching == 0 {
		if sel.slice != "" {
			return fmt.Sprintf("none of the %d live nodes is a host of TPU slice %q that matches the selector%s", live, sel.slice, deadPhrase(dead))
		}
		return fmt.Sprintf("none of the %d live nodes matches the selector%s", live, deadPhrase(dead))
	}
	if sel.Empty() {
		return fmt.Sprintf("the most any of the %d live nodes has is %s%s", live, rt.resourcesOf(largest, sel.slice), deadPhrase(dead))
	}
	return fmt.Sprintf("%d of %d live nodes match the selector; the most any of them has is %s%s", matching, live, rt.resourcesOf(largest, sel.slice), deadPhrase(dead))
}

func deadPhrase(dead int) string {
	if dead == 0 {
		return ""
	}
	if dead == 1 {
		return " (1 more node is dead)"
	}
	return fmt.Sprintf(" (%d more nodes are dead)", dead)
}

// couldRun reports whether the node is alive or coming back by itself.
func (n *node) couldRun() bool { return n.alive || n.restarting }

func fits(need, free []int64) bool {
	for i, q := range need {
		if q > free[i] {
			return false
		}
	}
	return true
}

func sub(a, d []int64) {
	for i, q := range d {
		a[i] -= q
	}
}

// add adds d to a, saturating at MaxInt64: validated amounts are at most
// backend.MaxAmount, but sums of many (a STRICT_PACK group's total) need
// not fit.
func add(a, d []int64) {
	for i, q := range d {
		if a[i] > math.MaxInt64-q {
			a[i] = math.MaxInt64
			continue
		}
		a[i] += q
	}
}

// enqueue queues a request whose dependencies are resolved, and schedules.
// b.mu must be held.
func (rt *Runtime) enqueue(t *task) {
	if t.cls.swept {
		t.cls = rt.readopt(t.cls)
	}
	c := t.cls
	if c.pl.Group != 0 {
		pg := rt.pgs[c.pl.Group]
		switch {
		case pg == nil || pg.state == pgRemoved:
			err, _ := rt.removedPG(c.pl.Group)
			rt.failRequest(t, cmp.Or(err, admission.PlacementGroupRemovedError(c.pl.Group)))
			return
		case pg.lost != nil:
			rt.failRequest(t, pg.lost)
			return
		}
	}
	rt.seq++
	t.seq = rt.seq
	t.state = stateQueued
	// Fast path: nothing older of this class waits, nothing starves.
	if c.len() == 0 && len(rt.pendingPGs) == 0 && !rt.anyStarving() {
		if rt.tryPlace(t, nil) {
			rt.start(t)
			return
		}
	}
	c.queue = append(c.queue, t)
	rt.queued++
	if !c.active {
		c.active = true
		rt.active = append(rt.active, c)
	}
	rt.schedule()
}

func (rt *Runtime) anyStarving() bool {
	for _, c := range rt.active {
		if c.len() > 0 && int(c.peek().bypass) > rt.starveLimit {
			return true
		}
	}
	for _, pg := range rt.pendingPGs {
		if pg.bypass > rt.starveLimit {
			return true
		}
	}
	return false
}

// blocker is a starving request that younger requests must not take nodes
// from.
type blocker struct {
	t  *task
	pg *pgroup
}

func (rt *Runtime) blocks(bl []blocker, n *node) bool {
	for _, x := range bl {
		if x.t != nil && x.t.cls.pl.Group == 0 && x.t.cls.sel.matches(n) && fits(x.t.cls.demand, n.capac) {
			return true
		}
		if x.pg != nil && x.pg.couldUse(n) {
			return true
		}
	}
	return false
}

// tryPlace finds resources for t and takes them. b.mu must be held.
func (rt *Runtime) tryPlace(t *task, bl []blocker) bool {
	c := t.cls
	if c.pl.Group != 0 {
		pg := rt.pgs[c.pl.Group]
		if pg == nil || pg.state != pgCreated || pg.lost != nil {
			return false
		}
		for i, bu := range pg.bundles {
			if (c.pl.Bundle == -1 || c.pl.Bundle == i) && bu.node != nil && bu.node.alive && c.sel.within(bu.sel) && fits(c.demand, bu.free) {
				sub(bu.free, c.demand)
				t.node, t.bundle = bu.node, bu
				return true
			}
		}
		return false
	}
	nn := len(rt.nodes)
	for k := range nn {
		n := rt.nodes[(rt.cursor+k)%nn]
		if !n.alive || n.draining || !fits(c.demand, n.free) || !c.sel.matches(n) {
			continue
		}
		if rt.needsHold(c.demand) && !n.held() {
			continue // claimed first (hostclaim.go)
		}
		if len(bl) > 0 && rt.blocks(bl, n) {
			continue
		}
		sub(n.free, c.demand)
		t.node = n
		t.setChips(n.takeChips(chipsOf(n, c.demand)))
		rt.cursor = (n.idx + 1) % nn
		return true
	}
	return false
}

// release returns t's resources. b.mu must be held.
func (rt *Runtime) release(t *task) {
	if t.bundle != nil {
		if t.bundle.pg.state != pgRemoved && t.bundle.node == t.node {
			add(t.bundle.free, t.cls.demand)
		}
	} else if t.node != nil && t.node.alive {
		add(t.node.free, t.cls.demand)
		t.node.putChips(t.chips())
	}
	if t.node != nil {
		rt.hostMaybeIdle(t.node)
	}
	t.setChips(0)
	if t.node != nil && t.node.draining {
		rt.drainLater(t.node)
	}
	t.node, t.bundle = nil, nil
}

// schedule runs one scheduling pass: pending placement groups first, then
// queued classes oldest head first. b.mu must be held.
func (rt *Runtime) schedule() {
	if rt.closed {
		return
	}
	if rt.hostClaims && !rt.scheduling {
		// Once the outermost pass has placed what it can (hostclaim.go).
		defer rt.kickHostClaims()
	}
	for _, p := range rt.slices.order {
		if len(p.waiting) > 0 {
			rt.serveSlices(p)
		}
	}
	var bl []blocker
	var waiting []blocker // unplaced, older than what is placed next
	// Both lists reuse the runtime's buffers, so a pass that leaves work
	// queued (every pass while the cluster is full) allocates nothing. A
	// pass started from within a pass (starting work can schedule) uses
	// lists of its own.
	if !rt.scheduling {
		rt.scheduling = true
		bl, waiting = rt.schedBlockers[:0], rt.schedWaiting[:0]
		defer func() {
			dropBlockers(bl)
			dropBlockers(waiting)
			rt.schedBlockers, rt.schedWaiting = bl[:0], waiting[:0]
			rt.scheduling = false
		}()
	}
	bump := func(seq uint64) {
		for _, w := range waiting {
			if w.t != nil && w.t.seq < seq {
				w.t.bypass++
			}
			if w.pg != nil && w.pg.seq < seq {
				w.pg.bypass++
			}
		}
	}
	if len(rt.pendingPGs) > 0 {
		kept := rt.pendingPGs[:0]
		for _, pg := range rt.pendingPGs {
			if pg.state == pgPending && rt.placePG(pg, bl) {
				bump(pg.seq)
				continue
			}
			if pg.state != pgPending {
				continue
			}
			kept = append(kept, pg)
			waiting = append(waiting, blocker{pg: pg})
			if pg.bypass > rt.starveLimit {
				bl = append(bl, blocker{pg: pg})
			}
		}
		clear(rt.pendingPGs[len(kept):])
		rt.pendingPGs = kept
	}
	if len(rt.active) == 0 {
		return
	}
	if len(rt.active) > 1 {
		slices.SortFunc(rt.active, func(x, y *class) int {
			switch {
			case x.len() == 0 && y.len() == 0:
				return 0
			case x.len() == 0:
				return 1
			case y.len() == 0:
				return -1
			case x.peek().seq < y.peek().seq:
				return -1
			case x.peek().seq > y.peek().seq:
				return 1
			}
			return 0
		})
	}
	active := rt.active
	for i, c := range active {
		for c.len() > 0 {
			t := c.peek()
			if !rt.tryPlace(t, bl) {
				// Only classes later in this pass read the lists: the
				// last one (often the only one) need not add to them.
				if i < len(active)-1 {
					waiting = append(waiting, blocker{t: t})
					if int(t.bypass) > rt.starveLimit {
						bl = append(bl, blocker{t: t})
					}
				}
				break
			}
			bump(t.seq)
			c.pop()
			rt.queued--
			rt.start(t)
		}
	}
	kept := rt.active[:0]
	for _, c := range rt.active {
		if c.len() > 0 {
			kept = append(kept, c)
		} else {
			c.active = false
		}
	}
	clear(rt.active[len(kept):])
	rt.active = kept
}

// dropBlockers clears a scratch list, so that it keeps no finished work
// alive. The list is short (a class head or two) and cleared after every
// pass: field by field it costs two pointer writes per entry, where
// clear's bulk write barrier cost more than the rest of a pass while the
// collector ran.
func dropBlockers(l []blocker) {
	for i := range l {
		l[i].t = nil
		l[i].pg = nil
	}
}

// unqueue removes a queued request. b.mu must be held.
func (rt *Runtime) unqueue(t *task) {
	if t.state == stateQueued && t.cls.remove(t) {
		rt.queued--
	}
}
