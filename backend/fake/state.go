package fake

import (
	"context"
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// Snapshot implements backend.Snapshotter. The state has one node, the
// virtual node [NodeName], alive and without capacity (the fake does no
// resource accounting). Every placement group is CREATED, with every bundle
// on NodeName, or REMOVED, with no node, as in backend/local. Actors are
// PENDING while their constructor runs, then ALIVE or DEAD. Nothing is ever
// queued; Running counts the task attempts and actor calls running now, in
// any goroutine. Tasks counts the task attempts running per name (none
// queue), and Failures lists the last failed attempts of tasks and calls,
// with node NodeName.
func (b *Backend) Snapshot(ctx context.Context) (*backend.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.precheckLocked("snapshot cluster"); err != nil {
		return nil, err
	}
	s := &backend.State{Running: len(b.running), Failures: b.failures.List()}
	counts := map[string]int{}
	for r := range b.running {
		if r.task {
			counts[r.name]++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		s.Tasks = append(s.Tasks, backend.TaskSummary{Name: name, Running: counts[name]})
	}
	s.Nodes = []backend.NodeState{{Name: NodeName, Labels: maps.Clone(b.opts.NodeLabels), Alive: true, Running: len(b.running)}}
	for _, id := range slices.Sorted(maps.Keys(b.groups)) {
		g := b.groups[id]
		ps := backend.PlacementGroupState{ID: id, Name: g.spec.Name, Strategy: g.spec.Strategy, State: "CREATED"}
		node := NodeName
		if g.removed {
			ps.State, node = "REMOVED", ""
		}
		for range g.spec.Bundles {
			ps.Nodes = append(ps.Nodes, node)
		}
		s.PlacementGroups = append(s.PlacementGroups, ps)
	}
	for _, id := range slices.Sorted(maps.Keys(b.actors)) {
		a := b.actors[id]
		as := backend.ActorState{ID: id, Class: a.spec.Class, Name: a.spec.Name, State: actorStateNames[a.state]}
		if a.state != actorDead {
			as.Node = NodeName
		}
		s.Actors = append(s.Actors, as)
	}
	return s, nil
}
