package tpu_test

import (
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

// TestMachineTypes pins every machine type's chips and node label.
// Sources: GKE's cluster autoscaler fixedTpuCount and singleHostTopologyMap
// (k8s.io/gke-autoscaling cluster-autoscaler
// pkg/cloudprovider/gke/machinetypes), xpk's system characteristics
// (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py),
// google/pathways-job MachineTypeToGKEAcceleratorTypeMap
// (internal/controller/pathwaysjob_controller.go) and
// https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus.
func TestMachineTypes(t *testing.T) {
	tests := []struct {
		name        string
		g           tpu.Generation
		chips       int
		accelerator string
		single      string // the one topology of a single-host type
	}{
		{"ct3-hightpu-4t", tpu.V3, 4, "tpu-v3-device", "2x2"},
		{"ct3p-hightpu-4t", tpu.V3, 4, "tpu-v3-slice", ""},
		{"ct4p-hightpu-4t", tpu.V4, 4, "tpu-v4-podslice", ""},
		{"ct5lp-hightpu-1t", tpu.V5e, 1, "tpu-v5-lite-podslice", "1x1"},
		{"ct5lp-hightpu-4t", tpu.V5e, 4, "tpu-v5-lite-podslice", ""},
		{"ct5lp-hightpu-8t", tpu.V5e, 8, "tpu-v5-lite-podslice", "2x4"},
		{"ct5l-hightpu-1t", tpu.V5e, 1, "tpu-v5-lite-device", "1x1"},
		{"ct5l-hightpu-4t", tpu.V5e, 4, "tpu-v5-lite-device", "2x2"},
		{"ct5l-hightpu-8t", tpu.V5e, 8, "tpu-v5-lite-device", "2x4"},
		{"ct5p-hightpu-4t", tpu.V5p, 4, "tpu-v5p-slice", ""},
		{"ct6e-standard-1t", tpu.V6e, 1, "tpu-v6e-slice", "1x1"},
		{"ct6e-standard-4t", tpu.V6e, 4, "tpu-v6e-slice", ""},
		{"ct6e-standard-8t", tpu.V6e, 8, "tpu-v6e-slice", "2x4"},
		{"tpu7x-standard-1t", tpu.V7x, 1, "tpu7x", "1x1x1"},
		{"tpu7x-standard-4t", tpu.V7x, 4, "tpu7x", ""},
		{"tpu7-standard-1t", tpu.V7x, 1, "tpu7", "1x1x1"},
		{"tpu7-standard-4t", tpu.V7x, 4, "tpu7", ""},
	}
	is := is.New(t)
	is.Equal(len(tpu.MachineTypes()), len(tests)) // the table holds exactly these
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			m, ok := tpu.LookupMachineType(" " + tt.name + " ")
			is.True(ok)
			is.Equal(m.Name, tt.name)
			is.Equal(m.Generation, tt.g)
			is.Equal(m.Chips, tt.chips)
			is.Equal(m.GKEAccelerator, tt.accelerator)
			g, err := tpu.ParseGeneration(m.GKEAccelerator)
			is.NoErr(err)
			is.Equal(g, tt.g) // the node label parses back to the generation
			is.Equal(m.SingleHost, tt.single != "")
			if tt.single != "" {
				is.True(m.Serves(tpu.MustParseTopology(tt.single)))
			}
		})
	}
	_, ok := tpu.LookupMachineType("ct6e-standard-16t") // no such VM
	is.True(!ok)
}

// TestValidChipsPerHost checks the chips per host each topology allows: the
// chips of the machine types serving it (sources as TestMachineTypes; the
// single-host shapes from GKE's cluster autoscaler singleHostTopologyMap,
// the 8t types' 2x4 from google/pathways-job ValidTpuTopologiesMap).
func TestValidChipsPerHost(t *testing.T) {
	tests := []struct {
		g        tpu.Generation
		topology string
		want     []int
		machine  string // SliceShape.MachineType at the default chips per host
	}{
		{tpu.V6e, "1x1", []int{1}, "ct6e-standard-1t"},
		{tpu.V6e, "2x2", []int{4}, "ct6e-standard-4t"},
		{tpu.V6e, "2x4", []int{4, 8}, "ct6e-standard-8t"}, // Ray's chips_per_vm ambiguity
		{tpu.V6e, "2x8", []int{4}, "ct6e-standard-4t"},    // Ray-only shape
		{tpu.V6e, "16x16", []int{4}, "ct6e-standard-4t"},
		{tpu.V5e, "1x1", []int{1}, "ct5lp-hightpu-1t"},
		{tpu.V5e, "2x2", []int{4}, "ct5lp-hightpu-4t"},
		{tpu.V5e, "2x4", []int{4, 8}, "ct5lp-hightpu-8t"},
		{tpu.V5e, "8x8", []int{4}, "ct5lp-hightpu-4t"},
		{tpu.V4, "2x2x1", []int{4}, "ct4p-hightpu-4t"},
		{tpu.V4, "8x16x16", []int{4}, "ct4p-hightpu-4t"},
		{tpu.V5p, "4x4x28", []int{4}, "ct5p-hightpu-4t"},
		{tpu.V7x, "1x1x1", []int{1}, "tpu7x-standard-1t"},
		{tpu.V7x, "2x2x1", []int{4}, "tpu7x-standard-4t"},
		{tpu.V7x, "16x16x16", []int{4}, "tpu7x-standard-4t"},
		{tpu.V3, "2x2", []int{4}, "ct3-hightpu-4t"},
		{tpu.V3, "4x4", []int{4}, "ct3p-hightpu-4t"},
		{tpu.V2, "4x4", []int{4}, ""}, // Cloud TPU VMs; no GKE machine type
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			topo := tpu.MustParseTopology(tt.topology)
			is.Equal(tt.g.ValidChipsPerHost(topo), tt.want)
			s, err := tpu.NewSliceShape(tt.g, tt.topology, 0)
			is.NoErr(err)
			is.Equal(s.MachineType().Name, tt.machine)
			for _, n := range tt.want {
				_, err := tpu.NewSliceShape(tt.g, tt.topology, n)
				is.NoErr(err) // every valid count builds a shape
			}
		})
	}
	is := is.New(t)
	is.Equal(tpu.Generation("v9").ValidChipsPerHost(tpu.MustParseTopology("4x4")), nil)
	is.Equal(tpu.V6e.ValidChipsPerHost(tpu.Topology{}), nil)
}

func TestSliceShapeGKEAccelerator(t *testing.T) {
	tests := []struct {
		g            tpu.Generation
		topology     string
		chipsPerHost int
		want         string
	}{
		{tpu.V3, "2x2", 0, "tpu-v3-device"},
		{tpu.V3, "4x4", 0, "tpu-v3-slice"},
		{tpu.V5e, "2x4", 0, "tpu-v5-lite-podslice"}, // never the legacy device label
		{tpu.V6e, "2x4", 4, "tpu-v6e-slice"},
		{tpu.V7x, "1x1x1", 0, "tpu7x"},
		{tpu.V2, "4x4", 0, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			s, err := tpu.NewSliceShape(tt.g, tt.topology, tt.chipsPerHost)
			is.NoErr(err)
			is.Equal(s.GKEAccelerator(), tt.want)
		})
	}
}

func TestChipsPerHostErrorNamesValid(t *testing.T) {
	is := is.New(t)
	_, err := tpu.NewSliceShape(tpu.V6e, "2x2", 1)
	is.True(errors.Is(err, tpu.ErrInvalidChipsPerHost))
	is.Equal(err.Error(), "invalid chips per host 1 for v6e 2x2: no 1-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)")
	_, err = tpu.NewSliceShape(tpu.V6e, "2x4", 2)
	is.Equal(err.Error(), "invalid chips per host 2 for v6e 2x4: no 2-chip v6e VM serves it; valid: 4 (ct6e-standard-4t), 8 (ct6e-standard-8t)")
}
