package cluster

import (
	"errors"
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// ErrRestarting marks the cause a [Runner] gives [LostFunc] when it is
// restarting the node's worker by itself: work only that node could hold
// then queues for it instead of failing as Infeasible. The runner brings
// the node back through its source (NodeSource.Restore) or reports it lost
// again without this mark when it gives up.
var ErrRestarting = errors.New("worker restarting")

// Restarting marks cause with [ErrRestarting]: the result matches it
// (errors.Is) and cause, and reads as cause, so the errors of the work
// the node ran still say why its worker was lost.
func Restarting(cause error) error {
	if cause == nil {
		cause = ErrRestarting
	}
	return restarting{cause}
}

type restarting struct{ error }

func (e restarting) Is(target error) bool { return target == ErrRestarting }
func (e restarting) Unwrap() error        { return e.error }

// sink is the runtime as the [NodeSink] its source reports to (a type of
// its own, so that Runtime's method set stays backend.Backend's).
type sink Runtime

func (s *sink) NodeAdded(n Node)                  { (*Runtime)(s).nodeAdded(n, true) }
func (s *sink) NodeDraining(name string)          { (*Runtime)(s).nodeDraining(name) }
func (s *sink) NodeLost(name string, cause error) { (*Runtime)(s).nodeLost(name, cause) }

// nodeAddedKept is NodeAdded of a node whose maps (Resources, Labels,
// Env) and TPU host nobody modifies afterwards: a StaticSource's, which
// keeps its nodes for Restore. The runtime keeps them instead of copies:
// at 8,192 TPU hosts the copies were a third of the live heap, which
// every collection marks.
func (s *sink) nodeAddedKept(n Node) { (*Runtime)(s).nodeAdded(n, false) }

// keptNodeSink is the runtime's sink as a [StaticSource] sees it.
type keptNodeSink interface{ nodeAddedKept(n Node) }

// nodeAdded implements [NodeSink]: a new node joins the node table (and
// the slice index, once every host of its slice is in); a known dead node
// comes back empty and idle. After Start, the runner is told (NodeUp).
// The runtime keeps copies of the node's maps if copy is set.
func (rt *Runtime) nodeAdded(spec Node, copy bool) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return
	}
	up := false
	if n := rt.byName[spec.Name]; n != nil {
		restored := rt.restoreLocked(n)
		if restored {
			n.spec.Handle = spec.Handle // a replaced host: the source's new handle
		}
		up = restored && rt.synced
		spec = n.spec
	} else {
		rt.addNodeLocked(spec, copy)
		up = rt.synced
	}
	if up {
		rt.nodeUp(spec)
	}
	rt.mu.Unlock()
}

// nodeUp tells the runner of a node on a goroutine that Close waits for.
// b.mu must be held and the runtime not closed.
func (rt *Runtime) nodeUp(spec Node) {
	rt.bg.Go(func() {
		if err := rt.runner.NodeUp(rt.runCtx, spec); err != nil {
			rt.log.Warn("cluster: runner failed to bring up node", "node", spec.Name, "cause", err)
		}
	})
}

// addNodeLocked adds a node to the table. b.mu must be held.
func (rt *Runtime) addNodeLocked(spec Node, copy bool) *node {
	if copy {
		spec.Resources = spec.Resources.Clone()
		spec.Labels, spec.Env = maps.Clone(spec.Labels), maps.Clone(spec.Env)
		if spec.TPU != nil {
			h := *spec.TPU
			spec.TPU = &h
		}
	}
	n := &node{idx: len(rt.nodes), name: spec.Name, labels: spec.Labels, env: spec.Env, spec: spec, alive: true}
	n.capac = rt.nodeVector(n, spec.Resources, slices.Sorted(maps.Keys(spec.Resources)))
	if n.labels == nil {
		n.labels = map[string]string{}
	}
	n.free = slices.Clone(n.capac)
	rt.nodes = append(rt.nodes, n)
	rt.byName[n.name] = n
	rt.epoch++
	rt.slices.addHost(rt, n)
	if rt.started {
		rt.schedule()
	}
	return n
}

// nodeDraining implements [NodeSink]: the node takes no new work and is
// lost once what runs there has ended.
func (rt *Runtime) nodeDraining(name string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := rt.byName[name]
	if rt.closed || n == nil || !n.alive || n.draining {
		return
	}
	n.draining = true
	rt.epoch++
	rt.markSliceHostDown(n)
	rt.drainCheck(n)
}

// drainCheck loses a draining node once nothing runs there. b.mu must be
// held.
func (rt *Runtime) drainCheck(n *node) {
	if n.draining && n.alive && n.running.len() == 0 && len(n.actors) == 0 && len(n.bundles) == 0 {
		rt.nodeLostLocked(n, backend.Errorf(backend.Unavailable, "drain node "+n.name, "node drained"), false)
	}
}

// drainLater checks a draining node on a goroutine once the caller has
// released b.mu, so that losing it never runs inside the caller's work.
// b.mu must be held.
func (rt *Runtime) drainLater(n *node) {
	if rt.closed {
		return
	}
	rt.bg.Go(func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if !rt.closed {
			rt.drainCheck(n)
		}
	})
}

// nodeLost implements [NodeSink]: the node's work fails with Unavailable
// and is retried, its actors restart elsewhere, and the runner is told
// (NodeDown).
func (rt *Runtime) nodeLost(name string, cause error) {
	if rt.lost(name, cause) {
		rt.runner.NodeDown(name)
	}
}

// lost is the [LostFunc] the runtime gives its runner, and NodeLost's
// work; it reports whether the node was alive.
func (rt *Runtime) lost(name string, cause error) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := rt.byName[name]
	if rt.closed || n == nil {
		return false
	}
	alive := n.alive
	if alive || n.restarting {
		rt.log.Debug("cluster: node lost", "node", name, "cause", cause)
	}
	rt.nodeLostLocked(n, cause, errors.Is(cause, ErrRestarting))
	return alive
}
