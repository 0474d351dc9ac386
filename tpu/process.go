package tpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Environment variables of multi-process hosts (v7x and later), set per
// TPU container by the KubeRay TPU webhook (ai-on-gke/kuberay-tpu-webhook
// main.go, mutatePod).
const (
	// EnvProcessAddresses lists host:port of every TPU process of the
	// slice, host by host and process by process within a host, in
	// TPU_WORKER_ID order. It replaces TPU_WORKER_HOSTNAMES on v7x.
	EnvProcessAddresses = "TPU_PROCESS_ADDRESSES"
	// EnvProcessPort is this process's port: DefaultProcessPort + its
	// index on the host.
	EnvProcessPort = "TPU_PROCESS_PORT"
)

// DefaultProcessPort is the port of process 0 on a host; process c listens
// on DefaultProcessPort+c (the webhook's tpuProcessPortBase).
const DefaultProcessPort = 8471

// ProcessesPerHost returns how many TPU processes (containers) one host of
// the slice runs in GKE's multi-container layout: 2 on a 4-chip v7x host,
// one per NUMA node with 2 chips each (the webhook's
// e2e/manifests/v7x/v7x-multi-container.yaml; the device plugin gives each
// such container chips bounds 1,2,1), otherwise 1. A host may also run a
// single container holding every chip (WorkerEnv); this is the layout that
// keeps each process on its own NUMA node. It returns 0 for an invalid
// shape.
func (s SliceShape) ProcessesPerHost() int {
	if s.Validate() != nil {
		return 0
	}
	if s.Generation == V7x && s.chipsPerHost() == 4 {
		return 2
	}
	return 1
}

// ChipsPerProcess returns the chips each process of a host holds:
// ChipsPerHost / ProcessesPerHost, or 0 for an invalid shape.
func (s SliceShape) ChipsPerProcess() int {
	p := s.ProcessesPerHost()
	if p == 0 {
		return 0
	}
	return s.chipsPerHost() / p
}

// TPUResourcePerHost returns Ray's TPU resource of one whole host when
// Ray counts resourcePerChip units per chip (RAY_TPU_RESOURCE_PER_CHIP,
// EnvResourcePerChip; 0 means the default 1): Ray's
// SlicePlacementGroup.devices_per_host, chips per host × resource per chip.
// With resourcePerChip = Generation.DevicesPerChip() on v7x it counts
// chiplets: 8 for a 4-chip host.
func (s SliceShape) TPUResourcePerHost(resourcePerChip int) int {
	return s.chipsPerHost() * max(1, resourcePerChip)
}

// ProcessEnv returns the environment of TPU process (container) process of
// the host with the given worker ID, in GKE's multi-container layout, as
// the device plugin and the KubeRay TPU webhook set it together:
// DevicePluginEnv for the process's ChipsPerProcess chips (so its bounds
// are the process's), plus
//
//	TPU_VISIBLE_CHIPS      the process's chips: process c holds chips c×k … c×k+k-1 (k = ChipsPerProcess)
//	TPU_WORKER_ID          workerID × ProcessesPerHost + process
//	TPU_NAME               sliceName
//
// and, on a multi-host slice,
//
//	TPU_WORKER_HOSTNAMES   hostnames joined with ","
//	TPU_PROCESS_ADDRESSES  hostname:8471+c for every host, then every process c
//	TPU_PROCESS_PORT       8471 + process
//
// With one process per host (every generation but v7x) it equals WorkerEnv
// for process 0. The visible chips of process 1 (chips 2 and 3) are
// inferred: the device plugin's test shows NUMA node 0 holding chips 0 and
// 1, and the plugin sets TPU_VISIBLE_CHIPS only for privileged containers
// with device spreading.
//
// Arguments are as for WorkerEnv, with process in 0..ProcessesPerHost-1;
// errors wrap ErrInvalidArgument. The caller owns the returned map.
func ProcessEnv(shape SliceShape, sliceName string, hostnames []string, workerID, process int) (map[string]string, error) {
	per := shape.ProcessesPerHost()
	if per <= 1 {
		if process != 0 {
			return nil, fmt.Errorf("%w: process %d of a %s host, which runs one process", ErrInvalidArgument, process, shape)
		}
		return WorkerEnv(shape, sliceName, hostnames, workerID)
	}
	if process < 0 || process >= per {
		return nil, fmt.Errorf("%w: process %d is outside 0..%d for a %s host", ErrInvalidArgument, process, per-1, shape)
	}
	k := shape.ChipsPerProcess()
	env, err := DevicePluginEnv(shape, k)
	if err != nil {
		return nil, err
	}
	hostnames, err = checkWorker(shape, sliceName, hostnames, workerID)
	if err != nil {
		return nil, err
	}
	visible := make([]int, k)
	for i := range visible {
		visible[i] = process*k + i
	}
	env[EnvVisibleChips] = joinInts(visible)
	env[EnvWorkerID] = strconv.Itoa(workerID*per + process)
	env[EnvName] = sliceName
	if shape.Hosts() > 1 {
		env[EnvWorkerHostnames] = strings.Join(hostnames, ",")
		setProcessAddresses(env, hostnames, per, process)
	}
	return env, nil
}

// setProcessAddresses sets TPU_PROCESS_ADDRESSES (hostname:8471+c for
// every host, then every process c of per) and TPU_PROCESS_PORT (8471 +
// process), as the KubeRay TPU webhook does for every container of a
// multi-host v7x slice (getTPUProcessAddresses in its main.go), one
// container per host included.
func setProcessAddresses(env map[string]string, hostnames []string, per, process int) {
	addrs := make([]string, 0, len(hostnames)*per)
	for _, h := range hostnames {
		for c := range per {
			addrs = append(addrs, h+":"+strconv.Itoa(DefaultProcessPort+c))
		}
	}
	env[EnvProcessAddresses] = strings.Join(addrs, ",")
	env[EnvProcessPort] = strconv.Itoa(DefaultProcessPort + process)
}

// MultisliceProcessEnv is MultisliceEnv for process process of a
// multi-process (v7x) host, as the KubeRay TPU webhook sets it: the
// coordinator address carries process 0's port
// ("<coordinatorHost>:8081") and each process of a host gets its own
// MEGASCALE_PORT, 8081 + process. Arguments and errors are those of
// MultisliceEnv, with process ≥ 0.
func MultisliceProcessEnv(coordinatorHost string, numSlices, sliceID, process int) (map[string]string, error) {
	if process < 0 {
		return nil, fmt.Errorf("%w: process %d is negative", ErrInvalidArgument, process)
	}
	env, err := MultisliceEnv(coordinatorHost, DefaultMegascalePort+process, numSlices, sliceID)
	if err != nil {
		return nil, err
	}
	env[EnvMegascaleCoordinatorAddress] = coordinatorHost + ":" + strconv.Itoa(DefaultMegascalePort)
	return env, nil
}
