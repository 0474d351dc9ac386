package fake

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// group is a placement group. The fake places it when it is created.
type group struct {
	id      backend.PlacementGroupID
	spec    *backend.PlacementGroupSpec
	removed bool
}

// placement is where work runs: a bundle of a group, or no group.
type placement struct {
	group  backend.PlacementGroupID
	bundle int // -1 outside a group
	env    map[string]string
}

// bundleIndex is the Call.Bundle of work with this placement.
func (p placement) bundleIndex() int {
	if p.group == 0 {
		return 0
	}
	return p.bundle
}

// placeLocked validates the scheduling of work and picks its bundle: the
// given one, or for -1 the first bundle whose resources hold the work's.
// The resources of a bundle are not consumed: the fake does no accounting.
// b.mu must be held.
func (b *Backend) placeLocked(op string, s *backend.Scheduling) (placement, error) {
	if err := s.Resources.Validate(); err != nil {
		return placement{}, backend.Reop(backend.InvalidArgument, op, err)
	}
	if err := s.NodeSelector.Validate(); err != nil {
		return placement{}, backend.Reop(backend.InvalidArgument, op, err)
	}
	if s.Placement.Group == 0 {
		return placement{bundle: -1, env: b.env(nil)}, nil
	}
	g := b.groups[s.Placement.Group]
	if g == nil {
		return placement{}, admission.PlacementGroupNotFound(op, s.Placement.Group)
	}
	if g.removed {
		return placement{}, admission.PlacementGroupRemovedError(g.id)
	}
	bundles := g.spec.Bundles
	i := s.Placement.Bundle
	if err := admission.CheckBundleIndex(op, g.id, i, len(bundles)); err != nil {
		return placement{}, err
	}
	for j, bu := range bundles {
		if (i == -1 || i == j) && backend.Fits(s.Resources, bu.Resources) {
			return placement{group: g.id, bundle: j, env: b.env(bu.Env)}, nil
		}
	}
	return placement{}, admission.BundleMisfit(op, s.Resources, i, g.id)
}

// CreatePlacementGroup implements backend.Backend. It validates the spec as
// backend/local does (strategy, at least one bundle, each bundle reserving
// some valid resource, valid label selectors) and places the group at once,
// without checking capacity.
func (b *Backend) CreatePlacementGroup(ctx context.Context, spec *backend.PlacementGroupSpec) (backend.PlacementGroupID, error) {
	if spec == nil {
		return 0, backend.Errorf(backend.InvalidArgument, "create placement group", "nil placement group spec")
	}
	spec = cloneGroupSpec(spec)
	op := "create placement group"
	if spec.Name != "" {
		op += " " + spec.Name
	}
	b.mu.Lock()
	r := b.recordLocked(Call{Kind: KindPlacementGroup, Name: spec.Name, GroupSpec: spec})
	err := ctx.Err()
	if err == nil {
		err = b.precheckLocked(op)
	}
	if err == nil {
		err = spec.Validate(op)
	}
	c := *r
	b.mu.Unlock()
	if err == nil {
		err = b.hook(op, c)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = b.precheckLocked(op)
	}
	if err != nil {
		r.Err = err
		return 0, err
	}
	g := &group{id: backend.PlacementGroupID(b.newIDLocked()), spec: spec}
	b.groups[g.id] = g
	r.Group = g.id
	return g.id, nil
}

// PlacementGroupReady implements backend.Backend. Groups are placed when
// created, so it returns at once: nil, or ErrPlacementGroupRemoved (code
// FailedPrecondition) for a removed group.
func (b *Backend) PlacementGroupReady(ctx context.Context, id backend.PlacementGroupID) error {
	const op = "wait for placement group"
	g, r, c, err := b.lookupGroup(op, KindPlacementGroupReady, id)
	if err == nil {
		err = b.hook(op, c)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = b.precheckLocked(op)
	}
	if err == nil && g.removed {
		err = admission.PlacementGroupRemovedError(id)
	}
	r.Err = err
	return err
}

// RemovePlacementGroup implements backend.Backend: work running in the group
// in other goroutines has its context cancelled and fails with
// ErrPlacementGroupRemoved, actors in it die, and later work pinned to it
// is rejected with FailedPrecondition. Removing twice is not an error.
func (b *Backend) RemovePlacementGroup(ctx context.Context, id backend.PlacementGroupID) error {
	const op = "remove placement group"
	g, r, c, err := b.lookupGroup(op, KindRemovePlacementGroup, id)
	if err == nil {
		err = b.hook(op, c)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = b.precheckLocked(op)
	}
	if err == nil && !g.removed {
		g.removed = true
		gone := admission.PlacementGroupRemovedError(id)
		for run := range b.running {
			if run.group == id && run.actor == nil {
				run.abortLocked(gone)
			}
		}
		for _, a := range b.actors {
			if a.pl.group == id {
				b.killLocked(a, backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "%w", gone))
			}
		}
	}
	r.Err = err
	return err
}

// lookupGroup records a call about group id and finds it.
func (b *Backend) lookupGroup(op string, kind Kind, id backend.PlacementGroupID) (*group, *Call, Call, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recordLocked(Call{Kind: kind, Group: id})
	if err := b.precheckLocked(op); err != nil {
		r.Err = err
		return nil, r, *r, err
	}
	g := b.groups[id]
	if g == nil {
		r.Err = backend.Errorf(backend.NotFound, op, "placement group %s does not exist", id)
		return nil, r, *r, r.Err
	}
	r.Name = g.spec.Name
	return g, r, *r, nil
}
