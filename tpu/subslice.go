package tpu

import (
	"fmt"
	"slices"
)

// Sub-slice keys. GKE labels each node of a sub-sliceable node pool with the
// ID of the sub-slice it belongs to, one label per sub-slice topology, and a
// pod asks for a sub-slice with an annotation; the device plugin then
// rewrites the container's env to the sub-slice (ai-on-gke/tpu-device-plugin
// pkg/tpu/util/util.go: SubSliceTopologyAnnotation,
// SubSliceTopologyLabelTemplate, SubslicePartitionLabelTemplate). Ray's
// subslice_placement_group labels the hosts it hands out with
// LabelRaySubslicePrefix+topology = the sub-slice index.
const (
	// AnnotationGKESubsliceTopology is the pod annotation naming the
	// sub-slice topology the pod runs on, such as "4x4".
	AnnotationGKESubsliceTopology = "cloud.google.com/gke-tpu-slice-topology"
	// LabelRaySubslicePrefix prefixes Ray's sub-slice label,
	// "ray.io/tpu-subslice-4x4".
	LabelRaySubslicePrefix = "ray.io/tpu-subslice-"
)

// subsliceTopologies is the device plugin's validSubsliceTopologySet.
var subsliceTopologies = []string{
	"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16",
	"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4",
}

// SubsliceLabel returns the GKE node label holding a node's sub-slice ID
// for sub-slices of topology t: "cloud.google.com/gke-tpu-slice-<t>-id" on
// v4, v5e, v5p and v6e, "cloud.google.com/gke-tpu-partition-<t>-id" on
// other generations (v7x). It returns "" for the zero Topology.
func SubsliceLabel(g Generation, t Topology) string {
	if t.IsZero() {
		return ""
	}
	switch g {
	case V4, V5e, V5p, V6e:
		return "cloud.google.com/gke-tpu-slice-" + t.String() + "-id"
	}
	return "cloud.google.com/gke-tpu-partition-" + t.String() + "-id"
}

// Subslice is an ICI-contiguous sub-grid of a bigger slice, such as a v6e
// 4x4 inside a 16x16 node pool: what GKE's sub-slicing schedules a pod
// onto and what Ray's subslice_placement_group reserves. The parent is
// split into Count equal sub-slices of whole hosts, numbered x-fastest.
//
// Build one with NewSubslice. The zero value is invalid. A Subslice is a
// comparable value and safe for concurrent use.
type Subslice struct {
	// Parent is the node pool's slice.
	Parent SliceShape
	// Shape is the sub-slice as a slice of its own: the parent's
	// generation and chips per host, the sub-slice topology. Its
	// DevicePluginEnv and WorkerEnv are the env the device plugin rewrites
	// a sub-slice container's to.
	Shape SliceShape
}

// NewSubslice returns the sub-slice of the given topology (parsed like
// ParseTopology) inside parent. The topology must be one the device plugin
// accepts for sub-slicing (1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16, 2x2x1,
// 2x2x2, 2x2x4, 2x4x4, 4x4x4), have the parent's dimensionality, divide
// each of the parent's dimensions, and cover whole hosts. Errors wrap
// ErrInvalidTopology or ErrInvalidChipsPerHost and list the valid
// sub-slice topologies of parent.
func NewSubslice(parent SliceShape, topology string) (Subslice, error) {
	if err := parent.Validate(); err != nil {
		return Subslice{}, err
	}
	t, terr := parseTopology(topology)
	if terr != nil {
		return Subslice{}, terr
	}
	if !subsliceFits(parent, t) {
		return Subslice{}, fmt.Errorf("%w: %s is not a sub-slice of %s; valid: %s",
			ErrInvalidTopology, t, parent, joinTopologies(SubsliceTopologies(parent)))
	}
	sub := SliceShape{Generation: parent.Generation, Topology: t, ChipsPerHost: parent.chipsPerHost()}
	if err := sub.checkChipsPerHost(); err != nil {
		return Subslice{}, err
	}
	return Subslice{Parent: parent, Shape: sub}, nil
}

// subsliceFits reports whether t is a sub-slice topology of parent.
func subsliceFits(parent SliceShape, t Topology) bool {
	if !slices.Contains(subsliceTopologies, t.String()) || t.NumDims() != parent.Topology.NumDims() {
		return false
	}
	grid, _ := hostGrid(parent.chipsPerHost())
	pb := parent.Topology.bounds3()
	for i, d := range t.bounds3() {
		if pb[i]%d != 0 {
			return false
		}
	}
	return tiles(t, grid)
}

// SubsliceTopologies returns the sub-slice topologies of parent that
// NewSubslice accepts, smallest first, or nil for an invalid parent. The
// caller owns the returned slice.
func SubsliceTopologies(parent SliceShape) []Topology {
	if parent.Validate() != nil {
		return nil
	}
	var out []Topology
	for _, s := range subsliceTopologies {
		t := MustParseTopology(s)
		if !subsliceFits(parent, t) {
			continue
		}
		sub := SliceShape{Generation: parent.Generation, Topology: t, ChipsPerHost: parent.chipsPerHost()}
		if sub.checkChipsPerHost() == nil {
			out = append(out, t)
		}
	}
	return out
}

// Count returns how many sub-slices the parent splits into, or 0 for the
// zero value.
func (s Subslice) Count() int {
	if s.Shape.Chips() == 0 {
		return 0
	}
	return s.Parent.Chips() / s.Shape.Chips()
}

// Workers returns the parent's worker IDs of the hosts of sub-slice index
// (0..Count-1), in the sub-slice's own worker-ID order: Workers(i)[w] is
// the parent host that is worker w of the sub-slice. Sub-slices and their
// hosts are numbered x-fastest, like WorkerOfChip. Errors wrap
// ErrInvalidArgument.
func (s Subslice) Workers(index int) ([]int, error) {
	n := s.Count()
	if index < 0 || index >= n {
		return nil, fmt.Errorf("%w: sub-slice %d is outside 0..%d of %s in %s", ErrInvalidArgument, index, n-1, s.Shape.Topology, s.Parent)
	}
	grid, _ := hostGrid(s.Parent.chipsPerHost())
	pb, sb := s.Parent.Topology.bounds3(), s.Shape.Topology.bounds3()
	var hb, shb, per [3]int // parent hosts, sub-slice hosts, sub-slices per axis
	for i := range 3 {
		hb[i], shb[i] = pb[i]/grid[i], sb[i]/grid[i]
		per[i] = hb[i] / shb[i]
	}
	origin := [3]int{index % per[0] * shb[0], index / per[0] % per[1] * shb[1], index / (per[0] * per[1]) * shb[2]}
	out := make([]int, 0, shb[0]*shb[1]*shb[2])
	for z := range shb[2] {
		for y := range shb[1] {
			for x := range shb[0] {
				hx, hy, hz := origin[0]+x, origin[1]+y, origin[2]+z
				out = append(out, hx+hy*hb[0]+hz*hb[0]*hb[1])
			}
		}
	}
	return out, nil
}

// GKELabel returns the GKE node label holding the sub-slice ID
// (SubsliceLabel).
func (s Subslice) GKELabel() string { return SubsliceLabel(s.Shape.Generation, s.Shape.Topology) }

// RayLabel returns Ray's sub-slice label, such as "ray.io/tpu-subslice-4x4".
func (s Subslice) RayLabel() string { return LabelRaySubslicePrefix + s.Shape.Topology.String() }

// String returns the sub-slice and its parent, such as "v6e 4x4 in v6e
// 16x16".
func (s Subslice) String() string {
	if s == (Subslice{}) {
		return ""
	}
	return s.Shape.String() + " in " + s.Parent.String()
}
