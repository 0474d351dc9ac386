// Package tpu holds the facts about Google Cloud TPUs that slice scheduling
// needs: generations, valid topologies, slice shapes, labels and environment.
//
// It is a leaf package with no I/O: every function is a pure computation over
// tables that mirror Ray (python/ray/_private/accelerators/tpu.py), the GKE
// TPU device plugin and the KubeRay TPU webhook, so a Go scheduler places and
// labels TPU hosts exactly as Ray does and Ray-written selectors keep working.
//
// # Generations
//
// Generation names a TPU generation: V2, V3, V4, V5e, V5p, V6e and V7x.
// ParseGeneration accepts every spelling in use: the short names, Ray's
// ("TPU-V6E", "v5litepod"), GKE's "tpu7x" and the
// cloud.google.com/gke-tpu-accelerator label values ("tpu-v6e-slice").
// Methods translate back: RayVersion, AcceleratorType, GKEAccelerator,
// CoresPerChip and TopologyDims.
//
// # Topologies
//
// Topology is a 2D or 3D chip grid such as 4x4 or 2x2x2. ParseTopology checks
// syntax; Generation.ParseTopology and Generation.ValidateTopology also check
// the generation's table of valid topologies (Ray's VALID_TPU_TOPOLOGY), and
// their errors list every valid topology, so "4x5" on v6e tells the user what
// to ask for instead.
//
// # Slice shapes
//
// SliceShape combines a generation, a topology and the chips per host (VM).
// NewSliceShape validates the three and applies Ray's default chips per
// host; the shape then derives the host count, Ray's pod type ("v6e-16"),
// the head resource that reserves a multi-host slice, and libtpu's
// TPU_HOST_BOUNDS and TPU_CHIPS_PER_HOST_BOUNDS. ParsePodType goes the other
// way, from "v6e-16" or "tpu7x-16" to a generation and a chip count.
//
// # Labels and environment
//
// The Label*, Resource* and Env* constants name the GKE and Ray keys.
// HostLabels gives the node labels of one host of a slice; WorkerEnv gives
// the TPU_* environment of its worker process and MultisliceEnv the
// MEGASCALE_* environment that joins several slices into one job.
//
// # Errors
//
// Every error wraps one sentinel, so errors.Is works: ErrUnknownGeneration
// (concretely a *GenerationError), ErrInvalidTopology (a *TopologyError,
// whose Valid field lists the valid topologies), ErrInvalidChipsPerHost,
// ErrInvalidPodType and ErrInvalidArgument. Messages name the offending
// input and say what is valid; they carry no "tpu:" prefix, because the
// caller's operation prefixes them once (goray reports `reserve TPU slices:
// topology "4x5" is not valid for v6e; valid: ...`). goray's error codes
// classify all of them as InvalidArgument.
//
// # Concurrency
//
// All types are immutable values and the package tables are read-only after
// initialisation, so every function and method is safe for concurrent use.
package tpu
