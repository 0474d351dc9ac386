package tpu

import (
	"slices"
	"strings"
)

// MachineType is a Compute Engine machine type that hosts TPU chips: the VM
// behind one host of a slice and one node of a GKE TPU node pool.
//
// The zero value names no machine. A MachineType is a comparable value and
// safe for concurrent use.
type MachineType struct {
	// Name is the machine type, such as "ct6e-standard-4t".
	Name string
	// Generation is the TPU generation of its chips.
	Generation Generation
	// Chips is the number of chips one VM holds (the node's
	// google.com/tpu capacity).
	Chips int
	// GKEAccelerator is the cloud.google.com/gke-tpu-accelerator label of
	// its nodes, such as "tpu-v6e-slice".
	GKEAccelerator string
	// SingleHost is true for machine types that only serve the one
	// topology whose chips fit on a single VM (the 1t and 8t types,
	// ct3-hightpu-4t's 2x2, the legacy v5e device types).
	SingleHost bool
	// MultiHost is true for machine types that only serve slices of
	// several VMs (ct3p-hightpu-4t).
	MultiHost bool
	// Legacy marks machine types SliceShape.MachineType never picks: the
	// v5e device types (ct5l-*) GKE keeps for old node pools, and the
	// tpu7-standard types, whose "tpu7" label the KubeRay TPU webhook does
	// not treat as v7x (it matches the prefix "tpu7x"). They still look up
	// and count towards ValidChipsPerHost.
	Legacy bool
}

// machineTypes is every TPU machine type, in the order SliceShape.MachineType
// prefers them. Sources: GKE's cluster autoscaler fixedTpuCount and
// singleHostTopologyMap (k8s.io/gke-autoscaling cluster-autoscaler
// pkg/cloudprovider/gke/machinetypes), xpk's system characteristics
// (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py),
// google/pathways-job MachineTypeToGKEAcceleratorTypeMap
// (internal/controller/pathwaysjob_controller.go) and
// https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus.
// GKE does not offer v2, which has no machine type here.
var machineTypes = []MachineType{
	{Name: "ct3-hightpu-4t", Generation: V3, Chips: 4, GKEAccelerator: "tpu-v3-device", SingleHost: true},
	{Name: "ct3p-hightpu-4t", Generation: V3, Chips: 4, GKEAccelerator: "tpu-v3-slice", MultiHost: true},
	{Name: "ct4p-hightpu-4t", Generation: V4, Chips: 4, GKEAccelerator: "tpu-v4-podslice"},
	{Name: "ct5lp-hightpu-1t", Generation: V5e, Chips: 1, GKEAccelerator: "tpu-v5-lite-podslice", SingleHost: true},
	{Name: "ct5lp-hightpu-4t", Generation: V5e, Chips: 4, GKEAccelerator: "tpu-v5-lite-podslice"},
	{Name: "ct5lp-hightpu-8t", Generation: V5e, Chips: 8, GKEAccelerator: "tpu-v5-lite-podslice", SingleHost: true},
	{Name: "ct5l-hightpu-1t", Generation: V5e, Chips: 1, GKEAccelerator: "tpu-v5-lite-device", SingleHost: true, Legacy: true},
	{Name: "ct5l-hightpu-4t", Generation: V5e, Chips: 4, GKEAccelerator: "tpu-v5-lite-device", SingleHost: true, Legacy: true},
	{Name: "ct5l-hightpu-8t", Generation: V5e, Chips: 8, GKEAccelerator: "tpu-v5-lite-device", SingleHost: true, Legacy: true},
	{Name: "ct5p-hightpu-4t", Generation: V5p, Chips: 4, GKEAccelerator: "tpu-v5p-slice"},
	{Name: "ct6e-standard-1t", Generation: V6e, Chips: 1, GKEAccelerator: "tpu-v6e-slice", SingleHost: true},
	{Name: "ct6e-standard-4t", Generation: V6e, Chips: 4, GKEAccelerator: "tpu-v6e-slice"},
	{Name: "ct6e-standard-8t", Generation: V6e, Chips: 8, GKEAccelerator: "tpu-v6e-slice", SingleHost: true},
	{Name: "tpu7x-standard-1t", Generation: V7x, Chips: 1, GKEAccelerator: "tpu7x", SingleHost: true},
	{Name: "tpu7x-standard-4t", Generation: V7x, Chips: 4, GKEAccelerator: "tpu7x"},
	{Name: "tpu7-standard-1t", Generation: V7x, Chips: 1, GKEAccelerator: "tpu7", SingleHost: true, Legacy: true},
	{Name: "tpu7-standard-4t", Generation: V7x, Chips: 4, GKEAccelerator: "tpu7", Legacy: true},
}

// MachineTypes returns every TPU machine type goray knows, newest form of
// each generation first. The caller owns the returned slice.
func MachineTypes() []MachineType { return slices.Clone(machineTypes) }

// LookupMachineType returns the machine type with the given name (case and
// surrounding space ignored), or false.
func LookupMachineType(name string) (MachineType, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	i := slices.IndexFunc(machineTypes, func(m MachineType) bool { return m.Name == name })
	if i < 0 {
		return MachineType{}, false
	}
	return machineTypes[i], true
}

// Serves reports whether VMs of type m make up a slice of topology t: the
// topology must have at least m.Chips chips, exactly m.Chips for a
// single-host type and more for a multi-host type, and m's chip grid must
// tile it. It does not check that m.Generation offers t.
func (m MachineType) Serves(t Topology) bool {
	chips := t.Chips()
	grid, ok := hostGrid(m.Chips)
	switch {
	case !ok || chips < m.Chips || !tiles(t, grid):
		return false
	case m.SingleHost:
		return chips == m.Chips
	case m.MultiHost:
		return chips > m.Chips
	}
	return true
}

// machineTypesFor returns g's machine types that serve t, legacy ones
// last.
func machineTypesFor(g Generation, t Topology) []MachineType {
	var out, legacy []MachineType
	for _, m := range machineTypes {
		if m.Generation != g || !m.Serves(t) {
			continue
		}
		if m.Legacy {
			legacy = append(legacy, m)
		} else {
			out = append(out, m)
		}
	}
	return append(out, legacy...)
}

// servesChips reports whether a real VM with chips chips serves a slice of
// g with topology t, without allocating (NewSliceShape is on hot paths).
func servesChips(g Generation, t Topology, chips int) bool {
	if g == V2 {
		return chips == DefaultChipsPerHost && tiles(t, [3]int{2, 2, 1})
	}
	for _, m := range machineTypes {
		if m.Generation == g && m.Chips == chips && m.Serves(t) {
			return true
		}
	}
	return false
}

// ValidChipsPerHost returns the chips per host (VM) that real VMs give a
// slice of g with topology t, ascending: the Chips of every machine type
// that serves t. v6e 2x4 is 4 or 8 (two ct6e-standard-4t VMs or one
// ct6e-standard-8t), v6e 2x2 only 4, v6e 1x1 only 1, v7x 2x2x2 only 4.
// V2, which has no GKE machine type, uses 4 chips per host as Cloud TPU VMs
// do. It returns nil for an unknown generation or the zero Topology.
func (g Generation) ValidChipsPerHost(t Topology) []int {
	if !g.Valid() || t.IsZero() {
		return nil
	}
	if g == V2 {
		if tiles(t, [3]int{2, 2, 1}) {
			return []int{DefaultChipsPerHost}
		}
		return nil
	}
	var out []int
	for _, m := range machineTypesFor(g, t) {
		out = append(out, m.Chips)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// MachineType returns the machine type of the slice's VMs: the current
// (non-legacy) type of the generation with ChipsPerHost chips that serves
// the topology, such as "ct6e-standard-4t" for v6e 4x4 and
// "ct6e-standard-8t" for v6e 2x4. It returns the zero MachineType for V2
// and for shapes no machine type serves.
func (s SliceShape) MachineType() MachineType {
	cph := s.chipsPerHost()
	for _, m := range machineTypesFor(s.Generation, s.Topology) {
		if m.Chips == cph {
			return m
		}
	}
	return MachineType{}
}

// GKEAccelerator returns the cloud.google.com/gke-tpu-accelerator label of
// the slice's nodes: the machine type's label, such as "tpu-v6e-slice", or
// "tpu-v3-device" for a single-host v3 2x2. It returns "" for V2.
func (s SliceShape) GKEAccelerator() string {
	if m := s.MachineType(); m.Name != "" {
		return m.GKEAccelerator
	}
	return s.Generation.GKEAccelerator()
}
