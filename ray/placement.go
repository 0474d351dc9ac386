package ray

import (
	"context"
	"maps"

	"github.com/goray-dev/goray/backend"
)

// Strategy is a placement group strategy.
type Strategy = backend.Strategy

// Placement group strategies, as in Ray.
const (
	// Pack puts bundles on as few nodes as possible.
	Pack = backend.Pack
	// Spread puts bundles on distinct nodes where possible.
	Spread = backend.Spread
	// StrictPack puts every bundle on one node, or waits.
	StrictPack = backend.StrictPack
	// StrictSpread puts every bundle on a distinct node, or waits.
	StrictSpread = backend.StrictSpread
)

// Bundle is one slot of a placement group: resources reserved together on
// one node, optionally restricted by node labels.
type Bundle struct {
	Resources     Resources
	LabelSelector NodeSelector
	// Env is added to the runtime env of work that runs in the bundle.
	Env map[string]string
}

// PlacementGroupSpec describes a placement group.
type PlacementGroupSpec struct {
	// Name is informational.
	Name     string
	Strategy Strategy
	Bundles  []Bundle
}

// PlacementGroup is a set of bundles reserved atomically: the backend places
// every bundle or none. Tasks and actors run inside it with [InBundle].
//
// A *PlacementGroup is safe for concurrent use.
type PlacementGroup struct {
	c    *Cluster
	id   backend.PlacementGroupID
	spec PlacementGroupSpec
}

// NewPlacementGroup queues a placement group for gang placement and returns
// at once; [PlacementGroup.Ready] waits until it is placed. A malformed spec
// fails with InvalidArgument, and a group that no node set could ever hold
// fails at once with Infeasible, saying why.
func NewPlacementGroup(ctx context.Context, c *Cluster, spec PlacementGroupSpec) (*PlacementGroup, error) {
	const op = "create placement group"
	if err := c.checkCtx(ctx, op); err != nil {
		return nil, err
	}
	// The handle, the backend's spec and (for one bundle) its bundle
	// come in one allocation.
	a := &pgAlloc{}
	bs := a.one[:]
	if len(spec.Bundles) != 1 {
		bs = make([]backend.Bundle, len(spec.Bundles))
	}
	for i, b := range spec.Bundles {
		bs[i] = backend.Bundle{
			Resources:     backend.Resources(maps.Clone(b.Resources)),
			LabelSelector: backend.LabelSelector(maps.Clone(b.LabelSelector)),
			Env:           maps.Clone(b.Env),
		}
	}
	a.spec = backend.PlacementGroupSpec{Name: spec.Name, Strategy: spec.Strategy, Bundles: bs}
	id, err := c.b.CreatePlacementGroup(ctx, &a.spec)
	if err != nil {
		return nil, err
	}
	a.h = PlacementGroup{c: c, id: id, spec: spec}
	return &a.h, nil
}

// pgAlloc is what NewPlacementGroup allocates.
type pgAlloc struct {
	h    PlacementGroup
	spec backend.PlacementGroupSpec
	one  [1]backend.Bundle
}

// ID returns the backend's ID of the group.
func (pg *PlacementGroup) ID() PlacementGroupID { return pg.id }

// NumBundles returns the number of bundles.
func (pg *PlacementGroup) NumBundles() int { return len(pg.spec.Bundles) }

// Ready waits until every bundle is placed, or ctx ends (returning
// ctx.Err(); the group stays queued), or the group is removed.
func (pg *PlacementGroup) Ready(ctx context.Context) error {
	if err := pg.c.checkCtx(ctx, "wait for placement group"); err != nil {
		return err
	}
	return pg.c.b.PlacementGroupReady(ctx, pg.id)
}

// Remove releases the group's resources at once. Work queued for the group
// fails with ErrPlacementGroupRemoved; running tasks in it have their
// context cancelled and their results fail with ErrPlacementGroupRemoved
// (their goroutines end when the user code returns); actors in it are
// killed, their calls failing with ActorDied. Remove is idempotent.
func (pg *PlacementGroup) Remove(ctx context.Context) error {
	if err := pg.c.checkCtx(ctx, "remove placement group"); err != nil {
		return err
	}
	return pg.c.b.RemovePlacementGroup(ctx, pg.id)
}
