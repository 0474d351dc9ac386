package tpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Environment variables the GKE TPU device plugin sets besides the TPU_*
// ones in env.go (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go,
// InitEnvs and addPodsliceOrSliceEnvs).
const (
	// EnvTopologyWrap says, per axis "x,y,z", whether the ICI links wrap
	// around (a torus); EnvWrap is its unprefixed twin with the same value.
	EnvTopologyWrap = "TPU_TOPOLOGY_WRAP"
	EnvWrap         = "WRAP"
	// EnvTopologyAlt is the twisted-torus flag, always "false" on GKE;
	// EnvAlt is its unprefixed twin.
	EnvTopologyAlt = "TPU_TOPOLOGY_ALT"
	EnvAlt         = "ALT"
	// EnvHostBoundsUnprefixed and EnvChipsPerHostBoundsUnprefixed repeat
	// TPU_HOST_BOUNDS and TPU_CHIPS_PER_HOST_BOUNDS without the prefix.
	EnvHostBoundsUnprefixed         = "HOST_BOUNDS"
	EnvChipsPerHostBoundsUnprefixed = "CHIPS_PER_HOST_BOUNDS"
	// EnvRuntimeMetricsPorts lists libtpu's metrics ports, one per TPU
	// device on the node, from 8431.
	EnvRuntimeMetricsPorts = "TPU_RUNTIME_METRICS_PORTS"
	// EnvICIResiliency is set on v4, v5p and v7x slices of 4x4x4 or
	// larger: "true", or "false" when the node's LabelGKEICIResiliency
	// says "false" (NodeEnv).
	EnvICIResiliency = "ENABLE_ICI_RESILIENCY"
)

// firstMetricsPort is the first of TPU_RUNTIME_METRICS_PORTS.
const firstMetricsPort = 8431

// DevicePluginEnv returns the environment the GKE TPU device plugin gives a
// container holding chips chips of one host of a slice of the given shape
// (chips 0 means the whole host):
//
//	TPU_SKIP_MDS_QUERY         "true"
//	TPU_RUNTIME_METRICS_PORTS  8431,… one per device on the node (two per v7x chip)
//	TPU_TOPOLOGY               the topology, such as "4x4"
//	TPU_ACCELERATOR_TYPE       shape.GKEPodType(), such as "v6e-16" or "tpu7x-16"
//
// and, for slice node pools (every GKE label but tpu-v3-device):
//
//	TPU_TOPOLOGY_ALT, ALT                        "false"
//	TPU_TOPOLOGY_WRAP, WRAP                      per axis: v5e and v6e wrap an axis of 16 chips;
//	                                             v3, v4, v5p and v7x wrap every axis from 4x4x4 up
//	TPU_HOST_BOUNDS, HOST_BOUNDS                 the topology ÷ the container's chip grid
//	TPU_CHIPS_PER_HOST_BOUNDS, CHIPS_PER_HOST_BOUNDS  the container's chip grid: 1→1,1,1 2→1,2,1 4→2,2,1 8→2,4,1
//	ENABLE_ICI_RESILIENCY                        "true" on v4, v5p and v7x from 4x4x4 up (NodeEnv
//	                                             turns it "false" on a node that disables it)
//
// and, on a single-host slice before v7x, TPU_WORKER_ID "0" and
// TPU_WORKER_HOSTNAMES "localhost". (From v7x on the plugin leaves those to
// whoever knows the containers: the KubeRay TPU webhook, see ProcessEnv.)
//
// The bounds describe the container, not the VM: a v7x container holding 2
// of a 4-chip host's chips on a 2x2x1 slice gets chips bounds "1,2,1" and
// host bounds "2,1,1", which is how two processes share one host.
//
// Not modelled: VBAR_CONTROL_SERVICE_URL and WORKLOAD_NIC_PREFERRED_NUMA
// (node plumbing), and TPU_VISIBLE_CHIPS, which the plugin sets only for
// privileged containers with device spreading (ProcessEnv sets it). v2,
// which GKE does not offer, gets the slice variables as v3 would.
//
// chips must be 0 or one of 1, 2, 4, 8 no larger than the host; errors wrap
// ErrInvalidArgument, or those of SliceShape.Validate. The caller owns the
// returned map.
func DevicePluginEnv(shape SliceShape, chips int) (map[string]string, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	cph := shape.chipsPerHost()
	if chips == 0 {
		chips = cph
	}
	grid, ok := hostGrid(chips)
	if !ok || chips > cph || !tiles(shape.Topology, grid) {
		return nil, fmt.Errorf("%w: a container of a %s host cannot hold %d chips; valid: %s",
			ErrInvalidArgument, shape, chips, joinInts(containerChipOptions(shape)))
	}
	devices := cph
	if shape.Generation == V7x {
		devices *= shape.Generation.DevicesPerChip() // the plugin's SupportsTensorNode doubles the count
	}
	env := map[string]string{
		EnvSkipMDSQuery:        "true",
		EnvRuntimeMetricsPorts: metricsPorts(devices),
		EnvTopology:            shape.Topology.String(),
		EnvAcceleratorType:     shape.GKEPodType(),
	}
	if shape.GKEAccelerator() != "tpu-v3-device" {
		b := shape.Topology.bounds3()
		hostBounds := joinBounds([3]int{b[0] / grid[0], b[1] / grid[1], b[2] / grid[2]})
		env[EnvTopologyAlt], env[EnvAlt] = "false", "false"
		env[EnvTopologyWrap], env[EnvWrap] = wrap(shape.Generation, b), wrap(shape.Generation, b)
		env[EnvHostBounds], env[EnvHostBoundsUnprefixed] = hostBounds, hostBounds
		env[EnvChipsPerHostBounds], env[EnvChipsPerHostBoundsUnprefixed] = joinBounds(grid), joinBounds(grid)
		if iciResilient(shape.Generation, b) {
			env[EnvICIResiliency] = "true"
		}
	}
	if cph == shape.Chips() && shape.Generation != V7x {
		env[EnvWorkerID], env[EnvWorkerHostnames] = "0", "localhost"
	}
	return env, nil
}

// NodeEnv adjusts env, as DevicePluginEnv, WorkerEnv or ProcessEnv
// return it for a shape, to the labels of the node it runs on, as the
// device plugin reads them: ENABLE_ICI_RESILIENCY becomes "false" where
// the node's LabelGKEICIResiliency is "false" (any case). Only a variable
// the shape already has is changed; env is modified in place and
// returned.
func NodeEnv(env map[string]string, nodeLabels map[string]string) map[string]string {
	if _, ok := env[EnvICIResiliency]; ok && strings.EqualFold(nodeLabels[LabelGKEICIResiliency], "false") {
		env[EnvICIResiliency] = "false"
	}
	return env
}

// containerChipOptions lists the chip counts a container of one host can
// hold.
func containerChipOptions(shape SliceShape) []int {
	var out []int
	for _, n := range []int{1, 2, 4, 8} {
		if g, _ := hostGrid(n); n <= shape.chipsPerHost() && tiles(shape.Topology, g) {
			out = append(out, n)
		}
	}
	return out
}

// wrap is the device plugin's wrap: v5e and v6e wrap an axis of 16 chips
// (a full pod edge); the others wrap every axis of a slice of 4x4x4 or
// larger.
func wrap(g Generation, b [3]int) string {
	w := make([]string, 3)
	for i, d := range b {
		switch g {
		case V5e, V6e:
			w[i] = strconv.FormatBool(d == 16)
		default:
			w[i] = strconv.FormatBool(cubeOrLarger(b))
		}
	}
	return strings.Join(w, ",")
}

// cubeOrLarger reports whether every axis is at least 4 (a v4 cube).
func cubeOrLarger(b [3]int) bool {
	return !slices.ContainsFunc(b[:], func(d int) bool { return d < 4 })
}

// iciResilient reports whether the device plugin enables ICI resiliency.
func iciResilient(g Generation, b [3]int) bool {
	return (g == V4 || g == V5p || g == V7x) && cubeOrLarger(b)
}

// metricsPorts lists n ports from 8431.
func metricsPorts(n int) string {
	ports := make([]int, n)
	for i := range ports {
		ports[i] = firstMetricsPort + i
	}
	return joinInts(ports)
}

// joinInts renders ints as "1,2,3".
func joinInts(ns []int) string {
	ss := make([]string, len(ns))
	for i, n := range ns {
		ss[i] = strconv.Itoa(n)
	}
	return strings.Join(ss, ",")
}

// PartialHostEnv returns the variables Ray sets for a process that holds
// only some chips of its host (TPUAcceleratorManager
// .set_current_process_visible_accelerator_ids in
// python/ray/_private/accelerators/tpu.py):
//
//	TPU_VISIBLE_CHIPS          the chip indices, such as "0,1"
//	TPU_CHIPS_PER_HOST_BOUNDS  "1,1,1" for 1 chip, "1,2,1" for 2
//	TPU_HOST_BOUNDS            "1,1,1" for 1 or 2 chips
//
// Ray sets no bounds for other counts (4 of an 8-chip host), and nothing
// at all when the process holds the whole host: PartialHostEnv then returns
// an empty map, meaning the host's env stands.
//
// chips are indices on the host, each in 0..ChipsPerHost-1, without
// repeats; errors wrap ErrInvalidArgument. The caller owns the returned map.
func PartialHostEnv(shape SliceShape, chips []int) (map[string]string, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	cph := shape.chipsPerHost()
	if len(chips) == 0 {
		return nil, fmt.Errorf("%w: no chips given for a partial %s host; want indices in 0..%d", ErrInvalidArgument, shape, cph-1)
	}
	seen := make([]bool, cph)
	for _, c := range chips {
		if c < 0 || c >= cph || seen[c] {
			return nil, fmt.Errorf("%w: chip %d of a %s host is repeated or outside 0..%d", ErrInvalidArgument, c, shape, cph-1)
		}
		seen[c] = true
	}
	env := map[string]string{}
	if len(chips) == cph {
		return env, nil
	}
	env[EnvVisibleChips] = joinInts(chips)
	switch len(chips) {
	case 1:
		env[EnvChipsPerHostBounds], env[EnvHostBounds] = "1,1,1", "1,1,1"
	case 2:
		env[EnvChipsPerHostBounds], env[EnvHostBounds] = "1,2,1", "1,1,1"
	}
	return env, nil
}
