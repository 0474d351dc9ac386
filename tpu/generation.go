package tpu

import (
	"slices"
	"strings"
)

// Generation is a TPU generation such as v6e. Its value is the canonical
// short name ("v5e", "v6e", "v7x"); use ParseGeneration to turn any Ray,
// GKE or Cloud TPU spelling into one of the constants below.
//
// The zero value is not a valid generation: its methods return zero values
// and Valid reports false. A Generation is a plain string and safe for
// concurrent use.
type Generation string

// The TPU generations Ray schedules (Ray's VALID_TPU_TYPES).
const (
	V2  Generation = "v2"
	V3  Generation = "v3"
	V4  Generation = "v4"
	V5e Generation = "v5e" // Ray and Cloud TPU call it "v5litepod".
	V5p Generation = "v5p"
	V6e Generation = "v6e" // Trillium.
	V7x Generation = "v7x" // Ironwood; GKE calls it "tpu7x".
)

// DefaultChipsPerHost is the chips per host (VM) of every multi-host slice
// whose VM size the caller does not override (Ray's
// DEFAULT_TPU_NUM_CHIPS_PER_HOST).
const DefaultChipsPerHost = 4

// generationInfo holds the per-generation facts (Ray's
// python/ray/_private/accelerators/tpu.py, the GKE device plugin's
// AcceleratorGen and numCores, https://cloud.google.com/tpu/docs).
type generationInfo struct {
	// ray is Ray's version name, the prefix of its pod types and of its
	// accelerator_type resource.
	ray string
	// gkePod is the generation prefix the GKE device plugin writes into
	// TPU_ACCELERATOR_TYPE (taken from the gke-tpu-accelerator label).
	gkePod string
	// gkeAccelerator is the cloud.google.com/gke-tpu-accelerator value; ""
	// when GKE does not offer the generation.
	gkeAccelerator string
	// coresPerChip is Ray's TensorCores per chip: 1 for the lite
	// generations (v5e, v6e), 2 otherwise.
	coresPerChip int
	// devicesPerChip is the JAX devices one chip shows: 2 where each
	// TensorCore is its own device (v2, v3, and v7x's two chiplets), 1
	// where the chip is one device (v4 and v5p megacore, v5e, v6e).
	devicesPerChip int
	// dims is the number of topology dimensions: 2 (torus) or 3 (cube).
	dims int
	// singleHost lists the topologies served by one VM holding every chip
	// (Ray's TPU_SINGLE_HOST_TOPOLOGIES for TPU_8_CHIPS_PER_HOST_TYPES).
	singleHost []string
}

// generationOrder is the order Generations returns and errors list.
var generationOrder = []Generation{V2, V3, V4, V5e, V5p, V6e, V7x}

// generationTable is the source of truth for per-generation facts.
var generationTable = map[Generation]generationInfo{
	V2:  {ray: "v2", gkePod: "v2", coresPerChip: 2, devicesPerChip: 2, dims: 2},
	V3:  {ray: "v3", gkePod: "v3", gkeAccelerator: "tpu-v3-slice", coresPerChip: 2, devicesPerChip: 2, dims: 2},
	V4:  {ray: "v4", gkePod: "v4", gkeAccelerator: "tpu-v4-podslice", coresPerChip: 2, devicesPerChip: 1, dims: 3},
	V5e: {ray: "v5litepod", gkePod: "v5litepod", gkeAccelerator: "tpu-v5-lite-podslice", coresPerChip: 1, devicesPerChip: 1, dims: 2, singleHost: []string{"1x1", "2x2", "2x4"}},
	V5p: {ray: "v5p", gkePod: "v5p", gkeAccelerator: "tpu-v5p-slice", coresPerChip: 2, devicesPerChip: 1, dims: 3},
	V6e: {ray: "v6e", gkePod: "v6e", gkeAccelerator: "tpu-v6e-slice", coresPerChip: 1, devicesPerChip: 1, dims: 2, singleHost: []string{"1x1", "2x2", "2x4"}},
	V7x: {ray: "v7x", gkePod: "tpu7x", gkeAccelerator: "tpu7x", coresPerChip: 2, devicesPerChip: 2, dims: 3},
}

// gkeAcceleratorAliases maps every gke-tpu-accelerator label value,
// current and legacy, to its generation. The forms are those the GKE TPU
// device plugin's AcceleratorGen accepts (ai-on-gke/tpu-device-plugin
// pkg/tpu/util/util.go) and GKE's cluster autoscaler lists
// (k8s.io/gke-autoscaling cluster-autoscaler
// pkg/cloudprovider/gke/machinetypes).
var gkeAcceleratorAliases = map[string]Generation{
	"tpu-v3-device":        V3, // single-host v3 (ct3-hightpu-4t, 2x2)
	"tpu-v3-slice":         V3, // v3 slices (ct3p-hightpu-4t)
	"tpu-v4-podslice":      V4,
	"tpu-v5-lite-podslice": V5e,
	"tpu-v5-lite-device":   V5e, // legacy single-host v5e node pools (ct5l-hightpu-*)
	"tpu-v5p-slice":        V5p,
	"tpu-v6e-slice":        V6e,
	"tpu7x":                V7x,
	"tpu7":                 V7x, // GKE labels tpu7-standard-* nodes "tpu7"
}

// versionAliases maps "v"-prefixed version names to their generation.
var versionAliases = map[string]Generation{
	"v2":        V2,
	"v3":        V3,
	"v4":        V4,
	"v5e":       V5e,
	"v5litepod": V5e,
	"v5lite":    V5e, // legacy: the device plugin's name for tpu-v5-lite-device nodes
	"v5p":       V5p,
	"v6e":       V6e,
	"v7x":       V7x,
	"v7":        V7x, // "tpu7" after the tpu→v rewrite
}

// Generations returns every known generation, oldest first. The caller owns
// the returned slice.
func Generations() []Generation {
	return slices.Clone(generationOrder)
}

// ParseGeneration returns the generation named by s. It ignores case and
// surrounding space and accepts the short name ("v6e", "v5e", "v7x"), Ray's
// names ("v5litepod", "TPU-V6E", "TPU-V5LITEPOD"), GKE's "tpu7x" and
// "tpu7", the legacy "v5lite", and the cloud.google.com/gke-tpu-accelerator
// label values ("tpu-v6e-slice", "tpu-v5-lite-podslice",
// "tpu-v5-lite-device", "tpu-v5p-slice", "tpu-v4-podslice", "tpu-v3-slice",
// "tpu-v3-device").
//
// An unknown name returns a *GenerationError wrapping ErrUnknownGeneration.
func ParseGeneration(s string) (Generation, error) {
	key := strings.ToLower(strings.TrimSpace(s))
	if g, ok := gkeAcceleratorAliases[key]; ok {
		return g, nil
	}
	if g, ok := versionAliases[normalizeVersionPrefix(key)]; ok {
		return g, nil
	}
	return "", &GenerationError{Input: s}
}

// normalizeVersionPrefix rewrites a lower-case "tpu-?v?" prefix to "v", as
// Ray's normalize_tpu_accelerator_type does: "tpu-v6e" → "v6e", "tpu7x" →
// "v7x".
func normalizeVersionPrefix(s string) string {
	rest, ok := strings.CutPrefix(s, "tpu")
	if !ok {
		return s
	}
	rest = strings.TrimPrefix(rest, "-")
	return "v" + strings.TrimPrefix(rest, "v")
}

// Valid reports whether g is one of the known generation constants.
func (g Generation) Valid() bool {
	_, ok := generationTable[g]
	return ok
}

// String returns the canonical short name goray prints, such as "v6e",
// "v5e" or "v7x". It is not always the name Ray accepts: Ray knows v5e only
// as "v5litepod", so send RayVersion (or AcceleratorType) to Ray.
func (g Generation) String() string { return string(g) }

// RayVersion returns Ray's name for g, the accelerator_version to send to
// Ray's slice_placement_group: "v5litepod" for V5e, otherwise the short
// name. Ray uses it in pod types ("v5litepod-16") and topology tables.
func (g Generation) RayVersion() string { return generationTable[g].ray }

// GKEPodTypePrefix returns the generation prefix the GKE TPU device plugin
// writes into TPU_ACCELERATOR_TYPE: "tpu7x" for V7x (where Ray says
// "v7x"), otherwise RayVersion.
func (g Generation) GKEPodTypePrefix() string { return generationTable[g].gkePod }

// AcceleratorType returns Ray's accelerator type for g, such as "TPU-V6E",
// "TPU-V5LITEPOD" or "TPU-V7X": the value of the ray.io/accelerator-type label
// and the suffix of the accelerator_type:<type> resource.
func (g Generation) AcceleratorType() string {
	if !g.Valid() {
		return ""
	}
	return "TPU-" + strings.ToUpper(g.RayVersion())
}

// GKEAccelerator returns the cloud.google.com/gke-tpu-accelerator node label
// value of g's slice node pools: "tpu-v3-slice", "tpu-v4-podslice",
// "tpu-v5-lite-podslice", "tpu-v5p-slice", "tpu-v6e-slice" or "tpu7x". It
// returns "" for V2, which GKE does not offer. A single-host v3 (2x2) node
// pool is labelled "tpu-v3-device" instead; SliceShape.GKEAccelerator gives
// the label of a given shape.
func (g Generation) GKEAccelerator() string { return generationTable[g].gkeAccelerator }

// CoresPerChip returns the TensorCores per chip as Ray counts them: 1 for V5e
// and V6e, 2 for every other generation (V7x's two chiplets count as 2).
// Pod types count cores, not chips.
func (g Generation) CoresPerChip() int { return generationTable[g].coresPerChip }

// DevicesPerChip returns how many JAX devices one chip of g shows: 2 for
// V7x (its two chiplets), V2 and V3 (one per TensorCore), 1 for V4 and V5p
// (megacore), V5e and V6e. Ray's TPU resource counts chips unless
// RAY_TPU_RESOURCE_PER_CHIP (EnvResourcePerChip) is set; setting it to
// DevicesPerChip on V7x makes Ray count chiplets. It returns 0 for an
// unknown generation.
func (g Generation) DevicesPerChip() int { return generationTable[g].devicesPerChip }

// TopologyDims returns the number of dimensions of g's topologies: 2 for V2,
// V3, V5e and V6e ("4x4"), 3 for V4, V5p and V7x ("2x2x2").
func (g Generation) TopologyDims() int { return generationTable[g].dims }

// DefaultChipsPerHost returns the chips per host (VM) Ray assumes for a
// slice of g with topology t when the caller gives no override (Ray's
// get_chips_per_host): for V5e and V6e, the single-host topologies 1x1, 2x2
// and 2x4 put every chip on one VM (1, 4 or 8 chips); everything else,
// including the zero Topology, uses DefaultChipsPerHost (4). One exception
// follows the real VM instead of Ray: a one-chip slice (V7x 1x1x1, served
// only by tpu7x-standard-1t) has 1 chip per host, where Ray would say 4. It
// returns 0 for an unknown generation.
func (g Generation) DefaultChipsPerHost(t Topology) int {
	info, ok := generationTable[g]
	if !ok {
		return 0
	}
	if t.Chips() == 1 {
		return 1
	}
	if !t.IsZero() && slices.Contains(info.singleHost, t.String()) {
		return t.Chips()
	}
	return DefaultChipsPerHost
}
