package tpu_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestProcessesPerHost(t *testing.T) {
	tests := []struct {
		g                      tpu.Generation
		topology               string
		processes, chips, tpus int // tpus: Ray's TPU per host with RAY_TPU_RESOURCE_PER_CHIP = DevicesPerChip
	}{
		// Two NUMA-aligned containers of 2 chips on a 4-chip v7x host
		// (ai-on-gke/kuberay-tpu-webhook e2e/manifests/v7x/v7x-multi-container.yaml);
		// two JAX devices per chip.
		{tpu.V7x, "2x2x1", 2, 2, 8},
		{tpu.V7x, "4x4x4", 2, 2, 8},
		{tpu.V7x, "1x1x1", 1, 1, 2},
		{tpu.V6e, "4x4", 1, 4, 4},
		{tpu.V5p, "2x2x2", 1, 4, 4},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			s := mustShape(t, tt.g, tt.topology, 0)
			is.Equal(s.ProcessesPerHost(), tt.processes)
			is.Equal(s.ChipsPerProcess(), tt.chips)
			is.Equal(s.TPUResourcePerHost(tt.g.DevicesPerChip()), tt.tpus)
			is.Equal(s.TPUResourcePerHost(0), s.ChipsPerHost) // Ray's default: one unit per chip
		})
	}
	is := is.New(t)
	is.Equal(tpu.SliceShape{}.ProcessesPerHost(), 0)
	is.Equal(tpu.SliceShape{}.ChipsPerProcess(), 0)
}

// TestProcessEnv follows the KubeRay TPU webhook's mutatePod
// (ai-on-gke/kuberay-tpu-webhook main.go): on v7x, TPU_WORKER_ID = host ×
// containers + container; TPU_PROCESS_ADDRESSES lists host:8471+c for every
// host and container; TPU_PROCESS_PORT = 8471+c; both only when the slice
// has more than one host. The bounds are the device plugin's for a 2-chip
// container (ai-on-gke/tpu-device-plugin pkg/tpu/util/util_test.go, "tpu7x
// slice 2x2x1 topology, 2 chips per node, numa aligned").
func TestProcessEnv(t *testing.T) {
	v7x16 := mustShape(t, tpu.V7x, "2x2x2", 0)
	v7x8 := mustShape(t, tpu.V7x, "2x2x1", 0)
	hosts := []string{"g-0-0.rc-headless", "g-0-1.rc-headless"}
	addrs := "g-0-0.rc-headless:8471,g-0-0.rc-headless:8472,g-0-1.rc-headless:8471,g-0-1.rc-headless:8472"
	tests := []struct {
		name            string
		shape           tpu.SliceShape
		hostnames       []string
		worker, process int
		requested       int
		want            map[string]string
	}{
		{"multi-host, host 0 process 0", v7x16, hosts, 0, 0, 2, map[string]string{
			"TPU_WORKER_ID": "0", "TPU_NAME": "g-0", "TPU_VISIBLE_CHIPS": "0,1",
			"TPU_WORKER_HOSTNAMES":  "g-0-0.rc-headless,g-0-1.rc-headless",
			"TPU_PROCESS_ADDRESSES": addrs, "TPU_PROCESS_PORT": "8471",
			"TPU_HOST_BOUNDS": "2,1,2", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
		}},
		{"multi-host, host 1 process 1", v7x16, hosts, 1, 1, 2, map[string]string{
			"TPU_WORKER_ID": "3", "TPU_NAME": "g-0", "TPU_VISIBLE_CHIPS": "2,3",
			"TPU_WORKER_HOSTNAMES":  "g-0-0.rc-headless,g-0-1.rc-headless",
			"TPU_PROCESS_ADDRESSES": addrs, "TPU_PROCESS_PORT": "8472",
			"TPU_HOST_BOUNDS": "2,1,2", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
		}},
		{"single host, process 1: no addresses", v7x8, nil, 0, 1, 2, map[string]string{
			"TPU_WORKER_ID": "1", "TPU_NAME": "g-0", "TPU_VISIBLE_CHIPS": "2,3",
			"TPU_HOST_BOUNDS": "2,1,1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			env, err := tpu.ProcessEnv(tt.shape, "g-0", tt.hostnames, tt.worker, tt.process)
			is.NoErr(err)
			want, err := tpu.DevicePluginEnv(tt.shape, tt.requested)
			is.NoErr(err)
			maps.Copy(want, tt.want)
			is.Equal(env, want)
			is.Equal(env["HOST_BOUNDS"], tt.want["TPU_HOST_BOUNDS"]) // unprefixed twins follow
		})
	}
	t.Run("one process per host is WorkerEnv", func(t *testing.T) {
		is := is.New(t)
		s := mustShape(t, tpu.V6e, "4x4", 0)
		four := []string{"a", "b", "c", "d"}
		env, err := tpu.ProcessEnv(s, "s", four, 2, 0)
		is.NoErr(err)
		we, err := tpu.WorkerEnv(s, "s", four, 2)
		is.NoErr(err)
		is.Equal(env, we)
	})
	t.Run("errors", func(t *testing.T) {
		is := is.New(t)
		for _, tc := range []struct {
			shape           tpu.SliceShape
			worker, process int
		}{
			{v7x16, 0, 2}, {v7x16, 0, -1}, {v7x16, 2, 0}, {mustShape(t, tpu.V6e, "4x4", 0), 0, 1},
		} {
			hs := hosts
			if tc.shape.Hosts() != 2 {
				hs = []string{"a", "b", "c", "d"}
			}
			_, err := tpu.ProcessEnv(tc.shape, "g-0", hs, tc.worker, tc.process)
			is.True(errors.Is(err, tpu.ErrInvalidArgument))
		}
	})
}

// TestMultisliceProcessEnv follows the webhook's v7x multislice injection:
// MEGASCALE_COORDINATOR_ADDRESS gets ":8081", MEGASCALE_PORT is 8081 + the
// container index.
func TestMultisliceProcessEnv(t *testing.T) {
	is := is.New(t)
	env, err := tpu.MultisliceProcessEnv("g-0-0.rc-headless", 2, 1, 1)
	is.NoErr(err)
	is.Equal(env, map[string]string{
		"MEGASCALE_COORDINATOR_ADDRESS": "g-0-0.rc-headless:8081",
		"MEGASCALE_PORT":                "8082",
		"MEGASCALE_NUM_SLICES":          "2",
		"MEGASCALE_SLICE_ID":            "1",
	})
	_, err = tpu.MultisliceProcessEnv("g-0-0.rc-headless", 2, 1, -1)
	is.True(errors.Is(err, tpu.ErrInvalidArgument))
	_, err = tpu.MultisliceProcessEnv("", 2, 1, 0)
	is.True(errors.Is(err, tpu.ErrInvalidArgument))
}
