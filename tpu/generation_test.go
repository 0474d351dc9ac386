package tpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestParseGeneration(t *testing.T) {
	tests := []struct {
		in   string
		want tpu.Generation
	}{
		{"v2", tpu.V2}, {"V2", tpu.V2}, {" v2 ", tpu.V2}, {"TPU-V2", tpu.V2}, {"tpu-v2", tpu.V2},
		{"v3", tpu.V3}, {"TPU-V3", tpu.V3},
		{"v4", tpu.V4}, {"TPU-V4", tpu.V4}, {"tpuv4", tpu.V4}, {"tpu-v4-podslice", tpu.V4},
		{"v5e", tpu.V5e}, {"V5E", tpu.V5e}, {"v5litepod", tpu.V5e}, {"TPU-V5LITEPOD", tpu.V5e},
		{"tpu-v5-lite-podslice", tpu.V5e}, {"tpu-v5-lite-device", tpu.V5e}, {"TPU-V5-LITE-PODSLICE", tpu.V5e},
		{"v5p", tpu.V5p}, {"TPU-V5P", tpu.V5p}, {"tpu-v5p-slice", tpu.V5p},
		{"v6e", tpu.V6e}, {"V6E", tpu.V6e}, {"TPU-V6E", tpu.V6e}, {"\tTPU-V6E\n", tpu.V6e}, {"tpu-v6e-slice", tpu.V6e},
		{"v7x", tpu.V7x}, {"V7X", tpu.V7x}, {"TPU-V7X", tpu.V7x}, {"tpu7x", tpu.V7x}, {"TPU7X", tpu.V7x},
		// GKE's "tpu7" accelerator label (tpu7-standard-* machine types in
		// GKE's cluster autoscaler, k8s.io/gke-autoscaling cluster-autoscaler
		// pkg/cloudprovider/gke/machinetypes; the device plugin's
		// ^tpu\d+[a-z]?$ accepts it).
		{"tpu7", tpu.V7x}, {"TPU7", tpu.V7x},
		// v3's GKE labels (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go
		// AcceleratorGen: "tpu-v3-device or tpu-v3-slice; return: v3").
		{"tpu-v3-slice", tpu.V3}, {"tpu-v3-device", tpu.V3},
		// The legacy v5e device generation: AcceleratorGen turns
		// tpu-v5-lite-device into "v5lite", so older nodes report
		// TPU_ACCELERATOR_TYPE=v5lite-<chips>.
		{"v5lite", tpu.V5e}, {"TPU-V5LITE", tpu.V5e},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			got, err := tpu.ParseGeneration(tt.in)
			is.NoErr(err)
			is.Equal(got, tt.want)
		})
	}
}

func TestParseGenerationErrors(t *testing.T) {
	for _, in := range []string{"v1", "v8", "v6", "tpu", "gpu", "v5lit", "tpu-v6e-podslice", "tpu8x"} {
		t.Run(in, func(t *testing.T) {
			is := is.New(t)
			g, err := tpu.ParseGeneration(in)
			is.True(err != nil)
			is.Equal(g, tpu.Generation(""))
			is.True(errors.Is(err, tpu.ErrUnknownGeneration))
			var gerr *tpu.GenerationError
			is.True(errors.As(err, &gerr))
			is.Equal(gerr.Input, in)
			msg := err.Error()
			is.True(strings.HasPrefix(msg, "unknown TPU generation "))
			is.True(strings.Contains(msg, "valid: v2, v3, v4, v5e, v5p, v6e, v7x"))
		})
	}
}

// An empty name says it is empty, and a pod type (gcloud's accelerator
// type, Ray's pod type) where a generation belongs names the generation
// and the topologies of that many chips.
func TestParseGenerationHints(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "the TPU generation is empty; valid: v2, v3, v4, v5e, v5p, v6e, v7x"},
		{" ", "the TPU generation is empty; valid: v2, v3, v4, v5e, v5p, v6e, v7x"},
		{"v6e-16", `"v6e-16" is a pod type (16 chips of v6e), not a TPU generation; did you mean v6e 2x8 or v6e 4x4?`},
		{"v5litepod-8", `"v5litepod-8" is a pod type (8 chips of v5e), not a TPU generation; did you mean v5e 2x4?`},
		{"tpu7x-16", `"tpu7x-16" is a pod type (8 chips of v7x), not a TPU generation; did you mean v7x 2x2x2?`},
		{"v6e-12", `"v6e-12" is a pod type (12 chips of v6e), not a TPU generation; the generation is v6e, and no v6e topology has 12 chips`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			_, err := tpu.ParseGeneration(tt.in)
			is.True(errors.Is(err, tpu.ErrUnknownGeneration))
			is.Equal(err.Error(), tt.want)
		})
	}
}

func TestGenerations(t *testing.T) {
	is := is.New(t)
	gens := tpu.Generations()
	is.Equal(gens, []tpu.Generation{tpu.V2, tpu.V3, tpu.V4, tpu.V5e, tpu.V5p, tpu.V6e, tpu.V7x})
	gens[0] = "mutated"
	is.Equal(tpu.Generations()[0], tpu.V2) // the caller owns the slice
	for _, g := range tpu.Generations() {
		is.True(g.Valid())
		back, err := tpu.ParseGeneration(g.String())
		is.NoErr(err)
		is.Equal(back, g)
		back, err = tpu.ParseGeneration(g.AcceleratorType())
		is.NoErr(err)
		is.Equal(back, g)
		back, err = tpu.ParseGeneration(g.RayVersion())
		is.NoErr(err)
		is.Equal(back, g)
		if accel := g.GKEAccelerator(); accel != "" {
			back, err = tpu.ParseGeneration(accel)
			is.NoErr(err)
			is.Equal(back, g)
		}
	}
}

func TestGenerationFacts(t *testing.T) {
	tests := []struct {
		g                                          tpu.Generation
		str, ray, accel, gke, gkePod               string
		coresPerChip, devicesPerChip, topologyDims int
	}{
		// str is what goray prints; ray is what to send to Ray
		// (VALID_TPU_TYPES in python/ray/_private/accelerators/tpu.py has
		// "v5litepod", not "v5e"); gkePod prefixes GKE's
		// TPU_ACCELERATOR_TYPE (the device plugin's convertAcceleratorType
		// uses the accelerator label, "tpu7x"). Devices per chip: v7x's two
		// chiplets are two JAX devices
		// (https://cloud.google.com/tpu/docs/tpu7x; Ray's
		// RAY_TPU_RESOURCE_PER_CHIP, ray-project/ray#64058).
		{tpu.V2, "v2", "v2", "TPU-V2", "", "v2", 2, 2, 2},
		{tpu.V3, "v3", "v3", "TPU-V3", "tpu-v3-slice", "v3", 2, 2, 2},
		{tpu.V4, "v4", "v4", "TPU-V4", "tpu-v4-podslice", "v4", 2, 1, 3},
		{tpu.V5e, "v5e", "v5litepod", "TPU-V5LITEPOD", "tpu-v5-lite-podslice", "v5litepod", 1, 1, 2},
		{tpu.V5p, "v5p", "v5p", "TPU-V5P", "tpu-v5p-slice", "v5p", 2, 1, 3},
		{tpu.V6e, "v6e", "v6e", "TPU-V6E", "tpu-v6e-slice", "v6e", 1, 1, 2},
		{tpu.V7x, "v7x", "v7x", "TPU-V7X", "tpu7x", "tpu7x", 2, 2, 3},
		{tpu.Generation("v9"), "v9", "", "", "", "", 0, 0, 0},
		{tpu.Generation(""), "", "", "", "", "", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tt.g.String(), tt.str)
			is.Equal(tt.g.RayVersion(), tt.ray)
			is.Equal(tt.g.AcceleratorType(), tt.accel)
			is.Equal(tt.g.GKEAccelerator(), tt.gke)
			is.Equal(tt.g.GKEPodTypePrefix(), tt.gkePod)
			is.Equal(tt.g.CoresPerChip(), tt.coresPerChip)
			is.Equal(tt.g.DevicesPerChip(), tt.devicesPerChip)
			is.Equal(tt.g.TopologyDims(), tt.topologyDims)
			is.Equal(tt.g.Valid(), tt.ray != "")
		})
	}
}

func TestDefaultChipsPerHost(t *testing.T) {
	tests := []struct {
		g        tpu.Generation
		topology string
		want     int
	}{
		{tpu.V6e, "1x1", 1},
		{tpu.V6e, "2x2", 4},
		{tpu.V6e, "2x4", 8},
		{tpu.V6e, "2x8", 4},
		{tpu.V6e, "4x4", 4},
		{tpu.V6e, "16x16", 4},
		{tpu.V6e, "", 4},
		{tpu.V5e, "1x1", 1},
		{tpu.V5e, "2x2", 4},
		{tpu.V5e, "2x4", 8},
		{tpu.V5e, "8x8", 4},
		{tpu.V4, "2x2x1", 4},
		{tpu.V4, "2x2x2", 4},
		{tpu.V5p, "2x2x1", 4},
		{tpu.V7x, "2x2x1", 4},
		{tpu.V7x, "1x1x1", 1}, // tpu7x-standard-1t; Ray's get_chips_per_host would say 4
		{tpu.V2, "4x4", 4},
		{tpu.V3, "32x32", 4},
		{tpu.Generation("v9"), "4x4", 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			var topo tpu.Topology
			if tt.topology != "" {
				topo = tpu.MustParseTopology(tt.topology)
			}
			is.Equal(tt.g.DefaultChipsPerHost(topo), tt.want)
		})
	}
}
