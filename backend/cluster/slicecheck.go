package cluster

import (
	"fmt"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// CheckSlices checks that the TPU hosts among nodes (those with a
// [TPUHost]) make whole slices, as the runtime groups them: nodes sharing
// TPUHost.Slice form a slice of one shape whose chips per host is the
// nodes' TPU capacity, and whose worker IDs are exactly 0..hosts-1. A
// static source calls it before it reports its nodes, so that a bad spec
// fails when it is built; the runtime leaves out of its slice index (and
// logs) hosts that fail these checks. Errors are InvalidArgument, naming
// op.
func CheckSlices(op string, nodes []Node) error {
	type pending struct {
		shape tpu.SliceShape
		hosts map[int]string
	}
	var order []string
	found := map[string]*pending{}
	for _, n := range nodes {
		if n.TPU == nil {
			continue
		}
		name := n.TPU.Slice
		shape, wid, err := hostSlice(n)
		if err != nil {
			return backend.Errorf(backend.InvalidArgument, op, "%w", err)
		}
		p := found[name]
		if p == nil {
			p = &pending{shape: shape, hosts: map[int]string{}}
			found[name] = p
			order = append(order, name)
		}
		if p.shape != shape {
			return backend.Errorf(backend.InvalidArgument, op, "TPU slice %q mixes shapes: node %q is %s, others %s", name, n.Name, shape, p.shape)
		}
		if other, dup := p.hosts[wid]; dup {
			return backend.Errorf(backend.InvalidArgument, op, "TPU slice %q: nodes %q and %q are both worker %d", name, other, n.Name, wid)
		}
		p.hosts[wid] = n.Name
	}
	for _, name := range order {
		p := found[name]
		for w := range p.shape.Hosts() {
			if _, ok := p.hosts[w]; !ok {
				return backend.Errorf(backend.InvalidArgument, op, "TPU slice %q (%s) has no worker %d: a slice needs all %d hosts", name, p.shape, w, p.shape.Hosts())
			}
		}
	}
	return nil
}

// hostSlice checks the TPU host n.TPU (which must be set) against the
// node's TPU capacity and returns its slice's shape, with the chips per
// host of that capacity, and its worker ID.
func hostSlice(n Node) (tpu.SliceShape, int, error) {
	h := n.TPU
	chips := int(n.Resources[backend.TPU])
	if h.Slice == "" {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q: its TPUHost has no Slice name", n.Name)
	}
	shape, err := tpu.NewSliceShape(h.Shape.Generation, h.Shape.Topology.String(), chips)
	if err != nil {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q of TPU slice %q (%s %s, TPU capacity %d): %w",
			n.Name, h.Slice, h.Shape.Generation, h.Shape.Topology, chips, err)
	}
	if h.Shape.ChipsPerHost != 0 && h.Shape.ChipsPerHost != chips {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q of TPU slice %q: its shape has %d chips per host but the node's TPU capacity is %d",
			n.Name, h.Slice, h.Shape.ChipsPerHost, chips)
	}
	if h.WorkerID < 0 || h.WorkerID >= shape.Hosts() {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q of TPU slice %q (%s): worker ID %d is not in 0..%d",
			n.Name, h.Slice, shape, h.WorkerID, shape.Hosts()-1)
	}
	return shape, h.WorkerID, nil
}
