package serve

import (
	"context"
	"fmt"
	"maps"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// placement is what a replica holds and starts its hosts' actors in: a
// reservation of whole slices (*ray.SlicePlacementGroup) or, with
// Deployment.ChipsPerReplica, some chips of one host (chipPlacement).
// Bundle i*BundlesPerHost() of PlacementGroup() is on host i.
type placement interface {
	PlacementGroup() *ray.PlacementGroup
	BundlesPerHost() int
	NumHosts() int
	Hosts() []string
	SliceNames() []string
	Release(ctx context.Context) error
}

var _ placement = (*ray.SlicePlacementGroup)(nil)

// chipPlacement holds ChipsPerReplica chips of one host of a slice of the
// deployment's shape: a placement group of one bundle {CPU: 1, TPU: k}
// on a node with the shape's GKE accelerator and topology labels. The
// runtime picks the chips and gives the work in the bundle Ray's
// TPU_VISIBLE_CHIPS for them, so replicas sharing a host do not share a
// chip.
type chipPlacement struct {
	pg    *ray.PlacementGroup
	host  string
	slice string
}

// bundleHost answers the node a bundle is on and its TPU slice.
var bundleHost = ray.NewTask("serve.bundleHost", func(ctx context.Context, _ struct{}) ([2]string, error) {
	rc, _ := ray.Runtime(ctx)
	return [2]string{rc.NodeName(), rc.NodeLabels()[tpu.LabelSliceName]}, nil
})

// reserveChips places a chipPlacement for replica, waiting within ctx; on
// any failure nothing is left held.
func reserveChips(ctx context.Context, c *ray.Cluster, d *Deployment, replica string) (_ *chipPlacement, err error) {
	shape, err := d.shape()
	if err != nil {
		return nil, err
	}
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Name: replica, Strategy: ray.StrictPack, Bundles: []ray.Bundle{{
		Resources: ray.Resources{ray.CPU: 1, ray.TPU: float64(d.ChipsPerReplica)},
		LabelSelector: ray.NodeSelector{
			tpu.LabelGKEAccelerator: shape.GKEAccelerator(),
			tpu.LabelGKETopology:    shape.Topology.String(),
		},
	}}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pg.Remove(context.WithoutCancel(ctx))
		}
	}()
	if err := pg.Ready(ctx); err != nil {
		return nil, err
	}
	where, err := bundleHost.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0}, ray.Retries(0)).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the host of %d chips: %w", d.ChipsPerReplica, err)
	}
	return &chipPlacement{pg: pg, host: where[0], slice: where[1]}, nil
}

func (p *chipPlacement) PlacementGroup() *ray.PlacementGroup { return p.pg }
func (p *chipPlacement) BundlesPerHost() int                 { return 1 }
func (p *chipPlacement) NumHosts() int                       { return 1 }
func (p *chipPlacement) Hosts() []string                     { return []string{p.host} }

// SliceNames returns the slice of the host, whose other chips other work
// may hold.
func (p *chipPlacement) SliceNames() []string {
	if p.slice == "" {
		return nil
	}
	return []string{p.slice}
}

func (p *chipPlacement) Release(ctx context.Context) error { return p.pg.Remove(ctx) }

// cpuPlacement holds a replica's Deployment.Resources on one node: a
// placement group of one bundle of them, with no TPU.
type cpuPlacement struct {
	pg   *ray.PlacementGroup
	host string
}

// reserveResources places a cpuPlacement for replica, waiting within ctx;
// on any failure nothing is left held. A bundle no node can hold fails at
// once with Infeasible.
func reserveResources(ctx context.Context, c *ray.Cluster, d *Deployment, replica string) (_ *cpuPlacement, err error) {
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Name: replica, Strategy: ray.StrictPack, Bundles: []ray.Bundle{{
		Resources: maps.Clone(d.Resources),
	}}})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pg.Remove(context.WithoutCancel(ctx))
		}
	}()
	if err := pg.Ready(ctx); err != nil {
		return nil, err
	}
	where, err := bundleHost.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0}, ray.Retries(0)).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("find the node of the replica's resources: %w", err)
	}
	return &cpuPlacement{pg: pg, host: where[0]}, nil
}

func (p *cpuPlacement) PlacementGroup() *ray.PlacementGroup { return p.pg }
func (p *cpuPlacement) BundlesPerHost() int                 { return 1 }
func (p *cpuPlacement) NumHosts() int                       { return 1 }
func (p *cpuPlacement) Hosts() []string                     { return []string{p.host} }
func (p *cpuPlacement) SliceNames() []string                { return nil }
func (p *cpuPlacement) Release(ctx context.Context) error   { return p.pg.Remove(ctx) }
