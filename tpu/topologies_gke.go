package tpu

// gkeTopologyTable lists the slice topologies GKE provisions, per
// generation, smallest slice first. Where it differs from Ray's table
// (topologyTable), Generation.ValidTopologies accepts the union and
// Generation.RayTopology / Generation.GKETopology tell the two apart.
//
// Sources, each pinned row by row by topologies_test.go:
//
//   - v4: xpk's ct4p-hightpu-4t list (AI-Hypercomputer/xpk
//     src/xpk/core/system_characteristics.py) and google/pathways-job's
//     ValidTpuTopologiesMap["ct4p-hightpu-4t"]
//     (internal/controller/pathwaysjob_controller.go), which adds 4x4x16
//     and 4x16x16. Beyond Ray: 4x16x16 and 8x16x16.
//   - v5p: xpk's ct5p-hightpu-4t list, the same as pathways-job's. Beyond
//     Ray: the long thin shapes with a dimension above 24 (4x4x28 … 16x20x28).
//     Ray's permutations of a shape (8x4x4 for 4x4x8) are Ray's alone.
//   - v5e, v6e: the GKE machine types' shapes (1x1 on ct5lp-hightpu-1t and
//     ct6e-standard-1t, 2x4 on the 8t types, 2x2 and up on the 4t types;
//     xpk, pathways-job, and https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
//     Ray's 2x8 is not among them.
//   - v7x: xpk's tpu7x-standard-1t (1x1x1) and tpu7x-standard-4t lists.
//     Beyond Ray: 1x1x1 and every shape above 8x16x16.
//   - v3: 2x2 on a single ct3-hightpu-4t host (node label tpu-v3-device; the
//     device plugin's tests in ai-on-gke/tpu-device-plugin
//     pkg/tpu/util/util_test.go and GKE's cluster autoscaler
//     singleHostTopologyMap) plus Ray's v3 shapes on ct3p-hightpu-4t; no
//     checked source lists GKE's v3 slices in full.
//   - v2: GKE does not offer v2; the row is empty.
var gkeTopologyTable = map[Generation][]string{
	V2: nil,
	V3: {"2x2", "4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"},
	V4: {
		"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x16", "4x8x8", "8x8x8",
		"8x8x12", "4x16x16", "8x8x16", "8x16x16",
	},
	V5e: {"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"},
	V5p: {
		"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8", "4x4x20",
		"4x8x12", "4x4x28", "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12", "4x4x52",
		"4x8x28", "4x12x20", "8x8x16", "4x4x68", "8x12x12", "4x4x76", "8x8x20", "4x12x28",
		"4x8x44", "4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12", "8x8x28", "4x4x116",
		"8x12x20", "4x4x124", "8x16x16", "4x12x44", "4x8x68", "4x20x28", "12x12x16", "4x4x148",
		"4x8x76", "4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172", "8x8x44", "12x12x20",
		"4x8x92", "4x4x188", "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52", "4x4x212",
		"12x12x24", "4x20x44", "8x16x28", "4x12x76", "4x8x116", "4x4x236", "12x16x20",
		"4x4x244", "4x8x124", "12x12x28", "16x16x16", "4x20x52", "8x12x44", "8x8x68",
		"4x12x92", "8x20x28", "12x16x24", "4x8x148", "12x20x20", "8x8x76", "4x28x44",
		"8x12x52", "16x16x20", "12x12x36", "4x8x164", "12x16x28", "4x20x68", "4x8x172",
		"4x12x116", "8x16x44", "12x20x24", "4x28x52", "8x8x92", "4x12x124", "4x8x188",
		"4x20x76", "16x16x24", "12x24x24", "16x20x28",
	},
	V6e: {"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"},
	V7x: {
		"1x1x1", "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8",
		"4x4x20", "4x8x12", "4x4x28", "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12",
		"4x4x52", "4x8x28", "4x12x20", "8x8x16", "4x4x68", "8x12x12", "4x4x76", "8x8x20",
		"4x12x28", "4x8x44", "4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12", "8x8x28",
		"4x4x116", "8x12x20", "4x4x124", "8x16x16", "4x12x44", "4x8x68", "4x20x28", "12x12x16",
		"4x4x148", "4x8x76", "4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172", "8x8x44",
		"12x12x20", "4x8x92", "4x4x188", "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52",
		"4x4x212", "12x12x24", "4x20x44", "8x16x28", "4x12x76", "4x8x116", "4x4x236",
		"12x16x20", "4x4x244", "4x8x124", "12x12x28", "16x16x16", "4x20x52", "8x12x44",
		"8x8x68", "4x12x92", "8x20x28", "12x16x24", "4x8x148", "12x20x20", "8x8x76", "4x28x44",
		"8x12x52", "16x16x20", "12x12x36", "4x8x164", "12x16x28", "4x20x68", "4x8x172",
		"4x12x116", "8x16x44", "12x20x24", "4x28x52", "8x8x92", "4x12x124", "4x8x188",
		"4x20x76", "16x16x24", "12x24x24", "16x16x32", "16x20x28", "16x24x24",
	},
}
