package cluster

import (
	"fmt"
	"strconv"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// CheckSlices checks that the TPU hosts among nodes make whole slices, as
// the runtime finds them from their labels: nodes sharing a slice name
// (tpu.LabelSliceName) form a slice whose generation and topology come
// from the GKE accelerator and topology labels, whose chips per host is
// the nodes' TPU capacity, and whose worker IDs (tpu.LabelWorkerID) are
// exactly 0..hosts-1. A static source calls it before it reports its
// nodes, so that a bad spec fails when it is built; the runtime leaves
// out of its slice index (and logs) hosts that fail these checks. Errors
// are InvalidArgument, naming op.
func CheckSlices(op string, nodes []Node) error {
	type pending struct {
		shape tpu.SliceShape
		hosts map[int]string
	}
	var order []string
	found := map[string]*pending{}
	for _, n := range nodes {
		name := n.Labels[tpu.LabelSliceName]
		if name == "" {
			continue
		}
		shape, wid, err := hostSlice(n.Name, name, n.Labels, int(n.Resources[backend.TPU]))
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

// hostSlice reads the slice shape and worker ID of TPU host node of slice
// from its labels and TPU capacity.
func hostSlice(node, slice string, labels map[string]string, chips int) (tpu.SliceShape, int, error) {
	shape, err := tpu.NewSliceShape(tpu.Generation(labels[tpu.LabelGKEAccelerator]), labels[tpu.LabelGKETopology], chips)
	if err != nil {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q of TPU slice %q (labels %s, %s; TPU capacity %d): %w",
			node, slice, tpu.LabelGKEAccelerator, tpu.LabelGKETopology, chips, err)
	}
	wid, err := strconv.Atoi(labels[tpu.LabelWorkerID])
	if err != nil || wid < 0 || wid >= shape.Hosts() {
		return tpu.SliceShape{}, 0, fmt.Errorf("node %q of TPU slice %q: label %s=%q is not a worker ID in 0..%d",
			node, slice, tpu.LabelWorkerID, labels[tpu.LabelWorkerID], shape.Hosts()-1)
	}
	return shape, wid, nil
}
