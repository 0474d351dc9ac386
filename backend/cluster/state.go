package cluster

import (
	"context"
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// Snapshot implements backend.Snapshotter.
func (b *Runtime) Snapshot(ctx context.Context) (*backend.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backend.Errorf(backend.FailedPrecondition, "snapshot cluster", "%w", backend.ErrClosed)
	}
	s := &backend.State{Queued: b.queued, Running: b.running, Tasks: b.taskSummaries(), Failures: b.failures.List()}
	for _, n := range b.nodes {
		ns := backend.NodeState{
			Name: n.name, Labels: maps.Clone(n.labels), Alive: n.alive,
			Capacity: b.resources(n.capac), Free: b.resources(n.free), Running: n.running.len(),
		}
		for _, t := range n.running.ts {
			ns.Tasks = append(ns.Tasks, taskName(t))
		}
		slices.Sort(ns.Tasks)
		s.Nodes = append(s.Nodes, ns)
	}
	for _, id := range sortedKeys(b.pgs) {
		pg := b.pgs[id]
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
	for _, id := range sortedKeys(b.actors) {
		a := b.actors[id]
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
