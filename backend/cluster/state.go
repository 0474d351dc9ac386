package cluster

import (
	"context"
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// Snapshot implements backend.Snapshotter.
func (rt *Runtime) Snapshot(ctx context.Context) (*backend.State, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return nil, backend.Errorf(backend.FailedPrecondition, "snapshot cluster", "%w", backend.ErrClosed)
	}
	s := &backend.State{Queued: rt.queued, Running: rt.running, Tasks: rt.taskSummaries(), Failures: rt.failures.List(), Counters: rt.counters.snapshot()}
	for _, n := range rt.nodes {
		ns := backend.NodeState{
			Name: n.name, Labels: maps.Clone(n.labels), Alive: n.alive,
			Capacity: rt.resourcesOf(n.capac, n.slice), Free: rt.resourcesOf(n.free, n.slice), Running: n.running.len(),
		}
		for _, t := range n.running.ts {
			ns.Tasks = append(ns.Tasks, taskName(t))
		}
		slices.Sort(ns.Tasks)
		s.Nodes = append(s.Nodes, ns)
	}
	for _, id := range sortedKeys(rt.pgs) {
		pg := rt.pgs[id]
		ps := backend.PlacementGroupState{ID: pg.id, Name: pg.spec.Name, Strategy: pg.spec.Strategy, State: pgStateNames[pg.state]}
		for _, bu := range pg.bundles {
			name := ""
			if bu.node != nil {
				name = bu.node.name
			}
			ps.Nodes = append(ps.Nodes, name)
		}
		s.PlacementGroups = append(s.PlacementGroups, ps)
	}
	for _, id := range sortedKeys(rt.actors) {
		a := rt.actors[id]
		as := backend.ActorState{ID: a.id, Class: a.spec.Class, Name: a.spec.Name, State: actorStateNames[a.state], Restarts: a.restarts}
		if a.node != nil {
			as.Node = a.node.name
		}
		s.Actors = append(s.Actors, as)
	}
	return s, nil
}

func sortedKeys[K ~uint64, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
