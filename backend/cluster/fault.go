package cluster

import (
	"context"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// KillNode kills a node through the node source (NodeSource.Kill), as a
// host failure does: its running tasks fail with Unavailable and are
// retried per their retry options; its actors restart on other nodes per
// their max restarts; work in placement group bundles on it is lost, and
// those bundles are placed again (a group pinned to hosts, such as a TPU
// slice reservation, waits for its host). Work that no live node can hold
// any more fails with Infeasible.
func (rt *Runtime) KillNode(ctx context.Context, name string) error {
	rt.mu.Lock()
	err := rt.precheck("kill node " + name)
	rt.mu.Unlock()
	if err != nil {
		return err
	}
	return rt.source.Kill(ctx, name)
}

// RestartNode brings a dead node back, empty and idle, through the node
// source (NodeSource.Restore).
func (rt *Runtime) RestartNode(ctx context.Context, name string) error {
	rt.mu.Lock()
	err := rt.precheck("restart node " + name)
	rt.mu.Unlock()
	if err != nil {
		return err
	}
	return rt.source.Restore(ctx, name)
}

// nodeLostLocked kills node n; restarting marks it as coming back by
// itself (its worker is being restarted), so that queued work it could
// hold waits for it instead of failing as Infeasible. b.mu must be held.
func (rt *Runtime) nodeLostLocked(n *node, cause error, restarting bool) {
	if !n.alive {
		if n.restarting && !restarting {
			rt.restartAbandoned(n)
		}
		return
	}
	name := n.name
	n.alive = false
	n.restarting = restarting
	if restarting {
		rt.counters.workerRestarts.Add(1)
	}
	rt.dropHoldLocked(n)
	rt.epoch++
	var lost error
	if cause == nil {
		lost = backend.Errorf(backend.Unavailable, "node "+name, "node %s died", name)
	} else {
		lost = backend.Errorf(backend.Unavailable, "node "+name, "node %s died: %w", name, backend.Cause(cause))
	}
	if !rt.started {
		if !n.draining {
			rt.markSliceHostDown(n)
		}
		n.draining = false
		return
	}
	// Gang semantics first: a slice reservation with a bundle here fails
	// all of its work, on every host, before single tasks are retried.
	for bu := range n.bundles {
		if len(bu.pg.slices) > 0 {
			rt.breakSliceGroup(bu.pg, n, cause)
		}
	}
	for _, t := range n.running.snapshot() {
		rt.abortTask(t, lost, true)
	}
	for a := range n.actors {
		rt.killActorLocked(a, lost, true)
	}
	for bu := range n.bundles {
		pg := bu.pg
		delete(n.bundles, bu)
		bu.node = nil
		bu.free = nil
		if pg.state == pgCreated && pg.lost == nil {
			pg.state = pgPending
			pg.ready = nil // made by the next waiter
			pg.readyOK = false
			rt.seq++
			pg.seq = rt.seq
			rt.pendingPGs = append(rt.pendingPGs, pg)
		}
	}
	copy(n.free, n.capac)
	n.chips = 0
	if !n.draining {
		rt.markSliceHostDown(n)
	}
	n.draining = false
	rt.failInfeasible()
	rt.schedule()
}

// restoreLocked brings dead node n back, empty and idle, and reports
// whether it was dead. b.mu must be held.
func (rt *Runtime) restoreLocked(n *node) bool {
	if n.alive {
		return false
	}
	n.alive, n.restarting = true, false
	copy(n.free, n.capac)
	n.chips = 0
	rt.epoch++
	rt.markSliceHostUp(n)
	if rt.started {
		rt.schedule()
	}
	return true
}

// breakSliceGroup fails a TPU slice reservation that lost host n, as a
// real slice fails: the other hosts' work would hang in its first
// collective, so every task pinned to the reservation's bundles, running or
// queued, fails at once with Unavailable naming the host and is not retried
// (a retry on the surviving hosts alone would hang the same way), and its
// actors die. Work submitted to the group later fails the same way. The
// reservation keeps its slices until it is removed, and a slice with a dead
// host is not reserved again until every host is back (RestartNode), so a
// caller retries by releasing and reserving afresh. b.mu must be held.
func (rt *Runtime) breakSliceGroup(pg *pgroup, n *node, cause error) {
	if pg.lost != nil || pg.state == pgRemoved {
		return
	}
	slice := ""
	if s := rt.slices.byNode[n]; s != nil {
		slice = " of TPU slice " + s.name
	}
	// The cause says why the host is gone (a node deleted or NotReady, a
	// worker pod lost, the slice's Lease lost): the caller needs it to
	// tell a dead host from a driver that lost its claim.
	why := ""
	if cause != nil {
		why = " (" + backend.Cause(cause).Error() + ")"
	}
	pg.lost = backend.Errorf(backend.Unavailable, "slice reservation "+pg.id.String(),
		"host %s%s was lost%s; all work on the reservation was stopped, as a slice cannot run with a host missing: release it and reserve again", n.name, slice, why)
	for _, bu := range pg.bundles {
		for _, t := range bu.running.snapshot() {
			rt.abortTask(t, pg.lost, false)
		}
		for a := range bu.actors {
			rt.killActorLocked(a, backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "%w", pg.lost), false)
		}
	}
	for _, c := range pg.classes {
		for c.len() > 0 {
			t := c.peek()
			c.pop()
			rt.queued--
			rt.failRequest(t, pg.lost)
		}
	}
	if i := slices.Index(rt.pendingPGs, pg); i >= 0 {
		rt.pendingPGs = slices.Delete(rt.pendingPGs, i, i+1)
	}
}

// restartAbandoned clears the restarting mark of a dead node whose worker
// will not come back, failing work only it could hold. b.mu must be held.
func (rt *Runtime) restartAbandoned(n *node) {
	n.restarting = false
	if rt.started && !rt.closed {
		rt.epoch++
		rt.failInfeasible()
	}
}

// failInfeasible fails queued work that the live nodes can no longer hold.
// b.mu must be held.
func (rt *Runtime) failInfeasible() {
	for _, c := range slices.Clone(rt.active) {
		if c.len() == 0 || c.pl.Group != 0 {
			continue
		}
		if err := rt.feasible("schedule", c); err != nil {
			for c.len() > 0 {
				t := c.peek()
				c.pop()
				rt.queued--
				rt.failRequest(t, err)
			}
		}
	}
}

// PreemptSlice kills every host of the named TPU slice at once, as GKE
// preempting a slice does (see KillNode); RestartNode brings hosts back.
func (rt *Runtime) PreemptSlice(ctx context.Context, slice string) error {
	rt.mu.Lock()
	var hosts []string
	for _, s := range rt.slices.all {
		if s.name == slice {
			hosts = s.hostNames()
		}
	}
	rt.mu.Unlock()
	if hosts == nil {
		return backend.Errorf(backend.NotFound, "preempt slice "+slice, "no TPU slice named %q", slice)
	}
	for _, h := range hosts {
		if err := rt.KillNode(ctx, h); err != nil {
			return err
		}
	}
	return nil
}
