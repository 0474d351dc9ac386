package tpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Environment variables libtpu, JAX and Ray read on a TPU host (Ray's
// python/ray/_private/accelerators/tpu.py, the GKE device plugin's InitEnvs
// in ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go, the KubeRay TPU
// webhook's mutatePod in ai-on-gke/kuberay-tpu-webhook main.go).
const (
	// EnvWorkerID is the host's worker ID within its slice, 0..hosts-1.
	EnvWorkerID = "TPU_WORKER_ID"
	// EnvWorkerHostnames lists every host of the slice, comma-separated, in
	// worker-ID order.
	EnvWorkerHostnames = "TPU_WORKER_HOSTNAMES"
	// EnvName is the slice name (Ray's ray.io/tpu-slice-name label).
	EnvName = "TPU_NAME"
	// EnvAcceleratorType is the pod type as GKE writes it, such as "v6e-16"
	// or "tpu7x-16".
	EnvAcceleratorType = "TPU_ACCELERATOR_TYPE"
	// EnvTopology is the slice topology, such as "4x4".
	EnvTopology = "TPU_TOPOLOGY"
	// EnvHostBounds is the grid of hosts, "x,y,z".
	EnvHostBounds = "TPU_HOST_BOUNDS"
	// EnvChipsPerHostBounds is the chip grid of one host, "x,y,z".
	EnvChipsPerHostBounds = "TPU_CHIPS_PER_HOST_BOUNDS"
	// EnvSkipMDSQuery stops libtpu from querying the GCE metadata server,
	// which has no TPU data on GKE.
	EnvSkipMDSQuery = "TPU_SKIP_MDS_QUERY"
	// EnvVisibleChips restricts a process to some of the host's chips,
	// such as "0,1".
	EnvVisibleChips = "TPU_VISIBLE_CHIPS"
	// EnvResourcePerChip is Ray's logical TPU units per chip (2 for v7x
	// per-chiplet accounting; default 1).
	EnvResourcePerChip = "RAY_TPU_RESOURCE_PER_CHIP"

	// EnvMegascaleCoordinatorAddress is the multislice coordinator's host
	// (slice 0's worker 0).
	EnvMegascaleCoordinatorAddress = "MEGASCALE_COORDINATOR_ADDRESS"
	// EnvMegascalePort is the multislice coordinator's port.
	EnvMegascalePort = "MEGASCALE_PORT"
	// EnvMegascaleNumSlices is the number of slices in the job.
	EnvMegascaleNumSlices = "MEGASCALE_NUM_SLICES"
	// EnvMegascaleSliceID is this slice's index, 0..slices-1.
	EnvMegascaleSliceID = "MEGASCALE_SLICE_ID"
)

// DefaultMegascalePort is the multislice coordinator port Ray and the TPU
// webhook use when none is given.
const DefaultMegascalePort = 8081

// WorkerEnv returns the environment of the host with the given worker ID in
// a slice of the given shape, one TPU container per host, as the GKE device
// plugin and the KubeRay TPU webhook set it together: DevicePluginEnv for
// the whole host, plus
//
//	TPU_WORKER_ID              workerID
//	TPU_WORKER_HOSTNAMES       hostnames joined with ",", in worker-ID order
//	TPU_NAME                   sliceName
//
// and, on a multi-host v7x slice, as the webhook sets them for every
// container from Ironwood on,
//
//	TPU_PROCESS_ADDRESSES      hostname:8471 for every host, in worker-ID order
//	TPU_PROCESS_PORT           8471
//
// hostnames[i] is the address of worker i and len(hostnames) must equal
// shape.Hosts(); a single-host slice may pass no hostnames, giving
// "localhost" as the device plugin does. workerID must be in
// 0..shape.Hosts()-1 and sliceName non-empty. Errors wrap ErrInvalidArgument,
// or the errors of SliceShape.Validate. The caller owns the returned map.
//
// WorkerEnv covers one process per host. ProcessEnv gives the v7x layout
// of several TPU containers per host (TPU_PROCESS_ADDRESSES,
// TPU_PROCESS_PORT, per-process TPU_WORKER_ID).
func WorkerEnv(shape SliceShape, sliceName string, hostnames []string, workerID int) (map[string]string, error) {
	env, err := DevicePluginEnv(shape, 0)
	if err != nil {
		return nil, err
	}
	hostnames, err = checkWorker(shape, sliceName, hostnames, workerID)
	if err != nil {
		return nil, err
	}
	env[EnvWorkerID] = strconv.Itoa(workerID)
	env[EnvWorkerHostnames] = strings.Join(hostnames, ",")
	env[EnvName] = sliceName
	if shape.Generation == V7x && shape.Hosts() > 1 {
		setProcessAddresses(env, hostnames, 1, 0)
	}
	return env, nil
}

// checkWorker validates the webhook's inputs for one host of a slice and
// returns the hostnames, defaulted to "localhost" for a single host.
func checkWorker(shape SliceShape, sliceName string, hostnames []string, workerID int) ([]string, error) {
	hosts := shape.Hosts()
	if strings.TrimSpace(sliceName) == "" {
		return nil, fmt.Errorf("%w: empty slice name for %s", ErrInvalidArgument, shape)
	}
	if hosts == 1 && len(hostnames) == 0 {
		hostnames = []string{"localhost"}
	}
	if len(hostnames) != hosts {
		return nil, fmt.Errorf("%w: %s has %d hosts but %d hostnames were given",
			ErrInvalidArgument, shape, hosts, len(hostnames))
	}
	for i, h := range hostnames {
		if h == "" || strings.ContainsAny(h, ", \t\n") {
			return nil, fmt.Errorf("%w: hostname %d (%q) of %s is empty or contains a comma or space",
				ErrInvalidArgument, i, h, shape)
		}
	}
	if workerID < 0 || workerID >= hosts {
		return nil, fmt.Errorf("%w: worker ID %d is outside 0..%d for %s",
			ErrInvalidArgument, workerID, hosts-1, shape)
	}
	return hostnames, nil
}

// MultisliceEnv returns the four MEGASCALE_* variables that join slice
// sliceID of numSlices into one multislice job, as Ray's
// get_tpu_coordinator_env_vars does. coordinatorAddress is the host of the
// coordinator (slice 0's worker 0) and is passed through as given; port 0
// means DefaultMegascalePort.
//
// Derive numSlices and sliceID from the slices actually reserved, never from
// variables already in the environment: a stale MEGASCALE_NUM_SLICES makes
// jax.distributed.initialize hang.
//
// It requires a non-empty coordinatorAddress without spaces, port in
// 0..65535, numSlices ≥ 1 and sliceID in 0..numSlices-1; errors wrap
// ErrInvalidArgument. The caller owns the returned map.
func MultisliceEnv(coordinatorAddress string, port, numSlices, sliceID int) (map[string]string, error) {
	if coordinatorAddress == "" || strings.ContainsAny(coordinatorAddress, " \t\n") {
		return nil, fmt.Errorf("%w: multislice coordinator address %q is empty or contains spaces",
			ErrInvalidArgument, coordinatorAddress)
	}
	if port == 0 {
		port = DefaultMegascalePort
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("%w: multislice coordinator port %d is outside 1..65535", ErrInvalidArgument, port)
	}
	if numSlices < 1 {
		return nil, fmt.Errorf("%w: number of slices %d is below 1", ErrInvalidArgument, numSlices)
	}
	if sliceID < 0 || sliceID >= numSlices {
		return nil, fmt.Errorf("%w: slice ID %d is outside 0..%d", ErrInvalidArgument, sliceID, numSlices-1)
	}
	return map[string]string{
		EnvMegascaleCoordinatorAddress: coordinatorAddress,
		EnvMegascalePort:               strconv.Itoa(port),
		EnvMegascaleNumSlices:          strconv.Itoa(numSlices),
		EnvMegascaleSliceID:            strconv.Itoa(sliceID),
	}, nil
}
