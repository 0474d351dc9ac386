package backendtest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// jaxView is what jax.distributed.initialize() derives from a TPU
// process's env on GKE, without arguments: JAX's GkeTpuCluster and
// K8sTpuCluster (jax/_src/clusters/cloud_tpu_cluster.py as of 2026, with
// TPU_SKIP_MDS_QUERY set so nothing comes from the metadata server):
//
//   - the worker list of the slice is TPU_PROCESS_ADDRESSES_PATH's file,
//     else TPU_PROCESS_ADDRESSES, else TPU_WORKER_HOSTNAMES, split on ","
//     (_get_worker_host_names_env_var, _get_worker_list_in_slice);
//   - the slice count and slice ID are MEGASCALE_NUM_SLICES and
//     MEGASCALE_SLICE_ID when MEGASCALE_COORDINATOR_ADDRESS is set, else 1
//     and 0 (has_megascale_address, _get_num_slices, _get_slice_id);
//   - process count = len(worker list) × slices (get_process_count);
//   - process ID = TPU_WORKER_ID + slice ID × len(worker list)
//     (get_process_id, _get_process_id_in_slice);
//   - the coordinator is MEGASCALE_COORDINATOR_ADDRESS when set, else the
//     first of the worker list, cut at its first ":" (port 8476 follows)
//     (get_coordinator_address).
type jaxView struct {
	count, id   int
	coordinator string
}

func jaxDetect(env map[string]string) (jaxView, error) {
	list := env["TPU_PROCESS_ADDRESSES"]
	if list == "" {
		list = env["TPU_WORKER_HOSTNAMES"]
	}
	if list == "" {
		return jaxView{}, fmt.Errorf("neither TPU_PROCESS_ADDRESSES nor TPU_WORKER_HOSTNAMES is set: GkeTpuCluster is not detected")
	}
	workers := strings.Split(list, ",")
	slices, sliceID := 1, 0
	coordinator := workers[0]
	if c := env["MEGASCALE_COORDINATOR_ADDRESS"]; c != "" {
		coordinator = c
		var err error
		if slices, err = strconv.Atoi(env["MEGASCALE_NUM_SLICES"]); err != nil {
			return jaxView{}, fmt.Errorf("MEGASCALE_NUM_SLICES: %w", err)
		}
		if sliceID, err = strconv.Atoi(env["MEGASCALE_SLICE_ID"]); err != nil {
			return jaxView{}, fmt.Errorf("MEGASCALE_SLICE_ID: %w", err)
		}
	}
	wid, err := strconv.Atoi(env["TPU_WORKER_ID"])
	if err != nil {
		return jaxView{}, fmt.Errorf("TPU_WORKER_ID: %w", err)
	}
	host, _, _ := strings.Cut(coordinator, ":")
	return jaxView{count: len(workers) * slices, id: wid + sliceID*len(workers), coordinator: host}, nil
}

// jaxNodes are TPU hosts of several generations, as GKE labels them: one
// slice of v6e 2x2, v4 2x2x2 and v5p 2x2x2, two of v6e 4x4 and of v7x
// 2x2x2.
func jaxNodes() []Node {
	var nodes []Node
	for _, sl := range []struct {
		gen   tpu.Generation
		topo  string
		count int
	}{{tpu.V6e, "2x2", 1}, {tpu.V6e, "4x4", 2}, {tpu.V4, "2x2x2", 1}, {tpu.V5p, "2x2x2", 1}, {tpu.V7x, "2x2x2", 2}} {
		shape, err := tpu.NewSliceShape(sl.gen, sl.topo, 0)
		if err != nil {
			panic(err)
		}
		var names []string
		for k := range sl.count {
			names = append(names, fmt.Sprintf("%s-%d", shape.PodType(), k))
		}
		nodes = append(nodes, tpuHostNodes(shape, "%s-w%d", names...)...)
	}
	return nodes
}

// testJAX runs one task per TPU process of reservations of every
// generation, one and two processes per v7x host, one slice and
// multislice, and applies JAX's own detection rules to each process's
// env: the processes are exactly JAX's process IDs 0..N-1 in order, each
// agrees on N and on one coordinator, the host of process 0.
func (s *suite) testJAX(t *testing.T) {
	s.need(t, s.h.Capabilities.TPUSlices || s.h.Capabilities.SliceReservations, "SliceReservations")
	c, ctx := s.cluster(t, jaxNodes()), s.ctxT(t)
	for _, tt := range []struct {
		spec      ray.SliceSpec
		processes int
	}{
		{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"}, 1},
		{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4"}, 4},
		{ray.SliceSpec{AcceleratorVersion: "v4", Topology: "2x2x2"}, 2},
		{ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2"}, 2},
		{ray.SliceSpec{AcceleratorVersion: "v7x", Topology: "2x2x2"}, 2},
		{ray.SliceSpec{AcceleratorVersion: "v7x", Topology: "2x2x2", ResourcesPerBundle: ray.Resources{ray.TPU: 2}}, 4},
		{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2}, 8},
		{ray.SliceSpec{AcceleratorVersion: "v7x", Topology: "2x2x2", NumSlices: 2}, 4},
		{ray.SliceSpec{AcceleratorVersion: "v7x", Topology: "2x2x2", NumSlices: 2, ResourcesPerBundle: ray.Resources{ray.TPU: 2}}, 8},
	} {
		name := fmt.Sprintf("%s %s x%d %d processes", tt.spec.AcceleratorVersion, tt.spec.Topology, max(1, tt.spec.NumSlices), tt.processes)
		t.Run(name, func(t *testing.T) {
			is := is.New(t)
			spg, err := ray.NewSlicePlacementGroup(ctx, c, tt.spec)
			is.NoErr(err)
			defer spg.Release(ctx)
			is.Equal(spg.NumProcesses(), tt.processes)
			envs, err := ray.RunOnSlice(ctx, spg, tpuEnv, struct{}{})
			is.NoErr(err)
			is.Equal(len(envs), tt.processes) // every process JAX waits for started
			var coordinator string
			for i, env := range envs {
				v, err := jaxDetect(env)
				is.NoErr(err)
				is.Equal(v.count, tt.processes) // JAX's process count
				is.Equal(v.id, i)               // JAX's process ID, in process order
				if i == 0 {
					coordinator = v.coordinator
					is.True(coordinator != "")
				}
				is.Equal(v.coordinator, coordinator) // one coordinator
				is.Equal(spg.WorkerEnv(i)[tpu.EnvWorkerID], env[tpu.EnvWorkerID])
			}
			// The coordinator is the host of process 0, as JAX requires
			// (the coordinator service starts in process 0).
			first := strings.Split(envs[0][tpu.EnvWorkerHostnames], ",")[0]
			is.Equal(coordinator, first)
			is.True(spg.WorkerEnv(tt.processes) == nil)
		})
	}
}
