package fake

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

var _ backend.SliceReserver = (*Backend)(nil)

// reservation is a granted slice reservation.
type reservation struct {
	group  backend.PlacementGroupID
	shape  tpu.SliceShape
	slices []backend.ReservedSlice
}

// ReserveSlices implements backend.SliceReserver. The fake has as many
// slices of every shape as asked for: each reservation gets fresh slices
// named "<pod type>-fake-<n>" with hosts "<slice>-w<worker>", and a
// placement group (recorded as a KindPlacementGroup call named after the
// request) whose bundles carry the TPU worker env of their host, derived
// as a real backend derives it. Bad requests fail as on a real backend:
// InvalidArgument for an unknown generation or a topology the generation
// lacks, or bundle resources that do not divide a host's chips. A reactor
// on KindPlacementGroup can make a reservation fail (say with
// context.DeadlineExceeded, as when slices stay busy).
func (b *Backend) ReserveSlices(ctx context.Context, req *backend.SliceRequest) (*backend.SliceReservation, error) {
	op := backend.ReserveSlicesOp(req.Name)
	rr, err := req.Resolve(op)
	if err != nil {
		return nil, err
	}
	if rr.Subslice.Count() > 0 {
		return nil, backend.Errorf(backend.Unimplemented, op, "the fake backend does not model sub-slices (asked for %s)", rr.Subslice)
	}
	shape, n, res, perHost := rr.Shape, rr.NumSlices, rr.BundleResources, rr.BundlesPerHost
	r := &backend.SliceReservation{ChipsPerHost: shape.ChipsPerHost, BundlesPerHost: perHost, BundleResources: res}
	spec := &backend.PlacementGroupSpec{Name: req.Name, Strategy: backend.StrictSpread}
	pending := &backend.PendingSliceRequest{
		Name: req.Name, Generation: shape.Generation.String(), Topology: shape.Topology.String(),
		ChipsPerHost: shape.ChipsPerHost, NumSlices: n, Since: time.Now(),
	}
	b.mu.Lock()
	first := b.nextSlice
	b.nextSlice += n
	// Pending until the placement group call, which reactors may hold up,
	// returns.
	b.pendingSlices = append(b.pendingSlices, pending)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.pendingSlices = slices.DeleteFunc(b.pendingSlices, func(p *backend.PendingSliceRequest) bool { return p == pending })
		b.mu.Unlock()
	}()
	coordinator := ""
	for si := range n {
		name := fmt.Sprintf("%s-fake-%d", shape.PodType(), first+si)
		rs := backend.ReservedSlice{Name: name}
		for w := range shape.Hosts() {
			rs.Hosts = append(rs.Hosts, fmt.Sprintf("%s-w%d", name, w))
		}
		rs.Hostnames = rs.Hosts
		if si == 0 {
			coordinator = rs.Hostnames[0]
		}
		for w := range shape.Hosts() {
			for j := range perHost {
				env, err := backend.SliceBundleEnv(shape, name, rs.Hostnames, w, j, perHost, coordinator, n, si)
				if err != nil {
					return nil, backend.Errorf(backend.Internal, op, "%v", err)
				}
				spec.Bundles = append(spec.Bundles, backend.Bundle{Resources: res.Clone(), Env: env})
				r.Env = append(r.Env, env)
			}
		}
		r.Slices = append(r.Slices, rs)
	}
	id, err := b.CreatePlacementGroup(ctx, spec)
	if err != nil {
		return nil, err
	}
	r.Group = id
	b.mu.Lock()
	b.reservations = append(b.reservations, &reservation{group: id, shape: shape, slices: r.Slices})
	b.mu.Unlock()
	return r, nil
}

// PendingSliceRequests implements backend.SliceReserver: the ReserveSlices
// calls that have not returned, which happens only while a reactor on
// KindPlacementGroup holds one up, in the order they were made.
func (b *Backend) PendingSliceRequests(ctx context.Context) ([]backend.PendingSliceRequest, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.precheckLocked(backend.ListPendingSlicesOp); err != nil {
		return nil, err
	}
	out := make([]backend.PendingSliceRequest, len(b.pendingSlices))
	for i, p := range b.pendingSlices {
		out[i] = *p
	}
	return out, nil
}

// Slices implements backend.SliceReserver: the slices of reservations not
// yet released.
func (b *Backend) Slices(ctx context.Context) ([]backend.SliceState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.precheckLocked(backend.ListSlicesOp); err != nil {
		return nil, err
	}
	var out []backend.SliceState
	for _, rv := range b.reservations {
		g := b.groups[rv.group]
		if g == nil || g.removed {
			continue
		}
		for _, rs := range rv.slices {
			st := backend.SliceState{
				Name: rs.Name, Generation: rv.shape.Generation.String(), Topology: rv.shape.Topology.String(),
				ChipsPerHost: rv.shape.ChipsPerHost, Intact: true, ReservedBy: rv.group, ReservedName: g.spec.Name,
			}
			for _, h := range rs.Hosts {
				st.Hosts = append(st.Hosts, backend.SliceHostState{Node: h, Alive: true, Chips: rv.shape.ChipsPerHost, ChipsInUse: rv.shape.ChipsPerHost})
			}
			out = append(out, st)
		}
	}
	return out, nil
}
