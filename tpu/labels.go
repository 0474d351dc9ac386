package tpu

import "strconv"

// GKE node labels and the extended resource of TPU nodes
// (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go).
const (
	// LabelGKEAccelerator holds the generation's GKE accelerator name,
	// such as "tpu-v6e-slice" (see Generation.GKEAccelerator).
	LabelGKEAccelerator = "cloud.google.com/gke-tpu-accelerator"
	// LabelGKETopology holds the slice topology, such as "4x4".
	LabelGKETopology = "cloud.google.com/gke-tpu-topology"
	// LabelGKENodePool holds the node pool name. A multi-host slice is its
	// own node pool, so this is the key pods of one slice share affinity on.
	LabelGKENodePool = "cloud.google.com/gke-nodepool"
	// LabelGKEAcceleratorCount holds the chips on the node.
	LabelGKEAcceleratorCount = "cloud.google.com/gke-accelerator-count"
	// LabelGKEICIResiliency is "false" on the nodes of a slice created
	// without ICI resiliency (a workload asks for such a slice with this
	// node selector); without it a slice is ICI resilient. The device
	// plugin then sets ENABLE_ICI_RESILIENCY=false (NodeEnv).
	LabelGKEICIResiliency = "cloud.google.com/gke-tpu-ici-resiliency"
	// ResourceGKETPU is the Kubernetes extended resource counting TPU chips;
	// pods request it with requests equal to limits.
	ResourceGKETPU = "google.com/tpu"
)

// Ray node labels and resources (src/ray/common/constants.h and
// python/ray/_private/accelerators/tpu.py). goray labels its TPU
// hosts with Ray's keys, so label selectors written for Ray work unchanged.
const (
	// LabelSliceName holds the slice name (TPU_NAME); every host of a
	// slice carries the same value.
	LabelSliceName = "ray.io/tpu-slice-name"
	// LabelWorkerID holds the host's worker ID (TPU_WORKER_ID), 0..hosts-1.
	LabelWorkerID = "ray.io/tpu-worker-id"
	// LabelPodType holds Ray's pod type, such as "v6e-16"
	// (SliceShape.PodType).
	LabelPodType = "ray.io/tpu-pod-type"
	// LabelTopology holds the slice topology, such as "4x4".
	LabelTopology = "ray.io/tpu-topology"
	// LabelAcceleratorType holds Ray's accelerator type, such as "TPU-V6E".
	LabelAcceleratorType = "ray.io/accelerator-type"
	// ResourceTPU is Ray's resource counting physical TPU chips.
	ResourceTPU = "TPU"
	// ResourceAcceleratorTypePrefix prefixes Ray's per-node accelerator
	// resource: "accelerator_type:TPU-V6E".
	ResourceAcceleratorTypePrefix = "accelerator_type:"
)

// HostLabels returns the labels of the host with the given worker ID in a
// slice of the given shape, as GKE and the TPU webhook label it, plus Ray's
// TPU labels:
//
//   - LabelGKEAccelerator (SliceShape.GKEAccelerator), LabelGKETopology,
//     LabelGKENodePool and LabelGKEAcceleratorCount (the chips per host),
//     omitted entirely for v2, which GKE does not offer;
//   - LabelSliceName, LabelWorkerID, LabelPodType, LabelTopology and
//     LabelAcceleratorType.
//
// Labels whose value would be empty (an empty sliceName or nodePool) are
// omitted. HostLabels does not validate its arguments; the shape should come
// from NewSliceShape and workerID should be in 0..shape.Hosts()-1. The caller
// owns the returned map.
func HostLabels(shape SliceShape, sliceName, nodePool string, workerID int) map[string]string {
	topology := shape.Topology.String()
	labels := map[string]string{
		LabelWorkerID:        strconv.Itoa(workerID),
		LabelPodType:         shape.PodType(),
		LabelTopology:        topology,
		LabelAcceleratorType: shape.AcceleratorType(),
	}
	if sliceName != "" {
		labels[LabelSliceName] = sliceName
	}
	if accel := shape.GKEAccelerator(); accel != "" {
		labels[LabelGKEAccelerator] = accel
		labels[LabelGKETopology] = topology
		labels[LabelGKEAcceleratorCount] = strconv.Itoa(shape.chipsPerHost())
		if nodePool != "" {
			labels[LabelGKENodePool] = nodePool
		}
	}
	return labels
}

// HostResources returns Ray's resources of the host with the given worker
// ID in a slice of the given shape, as Ray's TPU accelerator manager
// reports them (get_current_node_num_accelerators and
// get_current_node_additional_resources in
// python/ray/_private/accelerators/tpu.py):
//
//	TPU                          the host's chips
//	accelerator_type:TPU-V6E     1
//	<sliceName>                  1 on every host of the slice
//	TPU-<pod type>-head          1 on worker 0 only (SliceShape.HeadResource)
//
// so a Ray-style reservation can hold a slice by its name, or claim a
// whole slice through its single head unit. Ray adds the last two only
// when the slice name is known; HostResources omits them for an empty
// sliceName. The caller owns the returned map.
func HostResources(shape SliceShape, sliceName string, workerID int) map[string]float64 {
	res := map[string]float64{
		ResourceTPU: float64(shape.chipsPerHost()),
		ResourceAcceleratorTypePrefix + shape.AcceleratorType(): 1,
	}
	if sliceName != "" {
		res[sliceName] = 1
		if workerID == 0 {
			res[shape.HeadResource()] = 1
		}
	}
	return res
}
