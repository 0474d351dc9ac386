// Package tpu holds the facts about Google Cloud TPUs that slice scheduling
// needs: generations, valid topologies, slice shapes, labels and environment.
//
// It is a leaf package with no I/O: every function is a pure computation over
// tables that mirror Ray (python/ray/_private/accelerators/tpu.py), the GKE
// TPU device plugin, the KubeRay TPU webhook and GKE's machine types, so a Go
// scheduler places and labels TPU hosts exactly as Ray does, Ray-written
// selectors keep working, and the environment matches what a GKE container
// sees.
//
// # Generations
//
// Generation names a TPU generation: V2, V3, V4, V5e, V5p, V6e and V7x.
// ParseGeneration accepts every spelling in use: the short names, Ray's
// ("TPU-V6E", "v5litepod"), GKE's "tpu7x" and the
// cloud.google.com/gke-tpu-accelerator label values ("tpu-v6e-slice").
// Methods translate back: RayVersion, AcceleratorType, GKEAccelerator,
// GKEPodTypePrefix, CoresPerChip, DevicesPerChip and TopologyDims.
//
// # Names
//
// One generation has several names, and they are not interchangeable.
// String is what goray prints ("v5e", "v7x"). RayVersion is what to send to
// Ray as accelerator_version: Ray rejects "v5e" and wants "v5litepod".
// AcceleratorType ("TPU-V5LITEPOD") is Ray's accelerator type and
// ray.io/accelerator-type label. GKE's TPU_ACCELERATOR_TYPE uses
// GKEPodTypePrefix, which differs from Ray's pod type on v7x ("tpu7x-16"
// where Ray says "v7x-16"). ParseGeneration accepts all of them, plus GKE's
// "tpu7" label, v3's "tpu-v3-slice" and "tpu-v3-device" and the legacy
// "v5lite" of tpu-v5-lite-device nodes.
//
// # Topologies
//
// Topology is a 2D or 3D chip grid such as 4x4 or 2x2x2. ParseTopology checks
// syntax; Generation.ParseTopology and Generation.ValidateTopology also check
// the generation's valid topologies, and their errors list every valid
// topology, so "4x5" on v6e tells the user what to ask for instead. A
// topology is valid when Ray's table (VALID_TPU_TOPOLOGY) or GKE's lists
// have it; RayTopology and GKETopology tell which, since shapes only GKE
// provisions (v7x 1x1x1, v5p 4x4x28) fail Ray's own check and shapes only
// Ray lists (v6e 2x8) have no GKE node pool.
//
// # Machine types
//
// MachineType is a real TPU VM, such as ct6e-standard-4t (4 chips) or
// tpu7x-standard-1t (1 chip), and the topologies it serves.
// Generation.ValidChipsPerHost lists the chips per host real VMs give a
// topology (v6e 2x4: 4 or 8; v6e 2x2: only 4), and NewSliceShape rejects any
// other chips-per-host override with an error naming the valid ones.
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
// # Sub-slices
//
// Subslice is an ICI-contiguous sub-grid of a bigger slice, such as a v6e
// 4x4 inside a 16x16 node pool, as GKE's sub-slicing and Ray's
// subslice_placement_group use it. NewSubslice checks the topology against
// the device plugin's sub-slice set; Workers gives the parent hosts of each
// sub-slice; SubsliceLabel, AnnotationGKESubsliceTopology and
// LabelRaySubslicePrefix name the keys; Subslice.Shape's env is the
// rewritten env the device plugin gives a sub-slice container.
//
// # Labels and environment
//
// The Label*, Resource* and Env* constants name the GKE and Ray keys.
// HostLabels gives the node labels of one host of a slice. DevicePluginEnv
// gives the env the GKE device plugin injects (bounds, wrap, metrics
// ports); WorkerEnv adds the KubeRay webhook's TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES and TPU_NAME for one process per host; PartialHostEnv
// gives Ray's TPU_VISIBLE_CHIPS and bounds for work holding part of a host;
// MultisliceEnv gives the MEGASCALE_* environment that joins several slices
// into one job.
//
// # Processes
//
// A 4-chip v7x host runs two TPU processes, one per NUMA node
// (SliceShape.ProcessesPerHost). ProcessEnv gives each its env as the
// webhook sets it: TPU_WORKER_ID host×2+process, TPU_PROCESS_ADDRESSES,
// TPU_PROCESS_PORT 8471+process and its own TPU_VISIBLE_CHIPS;
// MultisliceProcessEnv gives MEGASCALE_PORT 8081+process. A v7x chip shows
// two JAX devices (Generation.DevicesPerChip); Ray counts chips unless
// RAY_TPU_RESOURCE_PER_CHIP says otherwise (SliceShape.TPUResourcePerHost).
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
//
// # Sources
//
// Table tests cite where each fact comes from: Ray's
// python/ray/_private/accelerators/tpu.py and python/ray/util/tpu.py,
// ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go and its tests,
// ai-on-gke/kuberay-tpu-webhook main.go, AI-Hypercomputer/xpk
// src/xpk/core/system_characteristics.py, google/pathways-job, GKE's
// cluster autoscaler machine types and the Cloud TPU and GKE docs.
package tpu
