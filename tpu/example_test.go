package tpu_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/goray-dev/goray/tpu"
)

func ExampleNewSliceShape() {
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		panic(err)
	}
	fmt.Println(shape)
	fmt.Println("chips:", shape.Chips(), "hosts:", shape.Hosts(), "chips per host:", shape.ChipsPerHost)
	fmt.Println("pod type:", shape.PodType(), "head resource:", shape.HeadResource())
	fmt.Println("host bounds:", shape.HostBounds())

	// v6e 2x4 is one 8-chip VM by default, or two 4-chip VMs on request.
	split, _ := tpu.NewSliceShape(tpu.V6e, "2x4", 4)
	fmt.Println(split, "hosts:", split.Hosts())

	_, err = tpu.NewSliceShape(tpu.V6e, "4x5", 0)
	fmt.Println(err)
	// Output:
	// v6e 4x4
	// chips: 16 hosts: 4 chips per host: 4
	// pod type: v6e-16 head resource: TPU-v6e-16-head
	// host bounds: 2,2,1
	// v6e 2x4 (4 chips per host) hosts: 2
	// topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
}

func ExampleWorkerEnv() {
	shape, err := tpu.NewSliceShape(tpu.V7x, "2x2x2", 0)
	if err != nil {
		panic(err)
	}
	hosts := []string{"tpu-0-0.rc-headless", "tpu-0-1.rc-headless"}
	env, err := tpu.WorkerEnv(shape, "tpu-0", hosts, 1)
	if err != nil {
		panic(err)
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Printf("%s=%s\n", k, env[k])
	}
	// Output:
	// ALT=false
	// CHIPS_PER_HOST_BOUNDS=2,2,1
	// HOST_BOUNDS=1,1,2
	// TPU_ACCELERATOR_TYPE=tpu7x-16
	// TPU_CHIPS_PER_HOST_BOUNDS=2,2,1
	// TPU_HOST_BOUNDS=1,1,2
	// TPU_NAME=tpu-0
	// TPU_PROCESS_ADDRESSES=tpu-0-0.rc-headless:8471,tpu-0-1.rc-headless:8471
	// TPU_PROCESS_PORT=8471
	// TPU_RUNTIME_METRICS_PORTS=8431,8432,8433,8434,8435,8436,8437,8438
	// TPU_SKIP_MDS_QUERY=true
	// TPU_TOPOLOGY=2x2x2
	// TPU_TOPOLOGY_ALT=false
	// TPU_TOPOLOGY_WRAP=false,false,false
	// TPU_WORKER_HOSTNAMES=tpu-0-0.rc-headless,tpu-0-1.rc-headless
	// TPU_WORKER_ID=1
	// WRAP=false,false,false
}

func ExampleMultisliceEnv() {
	env, err := tpu.MultisliceEnv("tpu-0-0.rc-headless", 0, 2, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(env)
	// Output:
	// map[MEGASCALE_COORDINATOR_ADDRESS:tpu-0-0.rc-headless MEGASCALE_NUM_SLICES:2 MEGASCALE_PORT:8081 MEGASCALE_SLICE_ID:1]
}

func ExampleParseGeneration() {
	for _, s := range []string{"TPU-V6E", "tpu7x", "tpu-v5-lite-podslice"} {
		g, err := tpu.ParseGeneration(s)
		if err != nil {
			panic(err)
		}
		fmt.Println(s, "→", g, g.RayVersion(), g.AcceleratorType(), g.GKEAccelerator())
	}
	// Output:
	// TPU-V6E → v6e v6e TPU-V6E tpu-v6e-slice
	// tpu7x → v7x v7x TPU-V7X tpu7x
	// tpu-v5-lite-podslice → v5e v5litepod TPU-V5LITEPOD tpu-v5-lite-podslice
}

func ExampleParsePodType() {
	g, chips, err := tpu.ParsePodType("tpu7x-16")
	if err != nil {
		panic(err)
	}
	fmt.Println(g, chips)
	// Output: v7x 8
}

func ExampleHostLabels() {
	shape, _ := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	labels := tpu.HostLabels(shape, "workers-0", "pool-a", 0)
	fmt.Println(labels[tpu.LabelGKEAccelerator], labels[tpu.LabelGKEAcceleratorCount], labels[tpu.LabelPodType], labels[tpu.LabelWorkerID])
	// Output: tpu-v6e-slice 4 v6e-16 0
}

func ExampleGeneration_ValidChipsPerHost() {
	topo := tpu.MustParseTopology("2x4")
	fmt.Println(tpu.V6e.ValidChipsPerHost(topo))
	for _, n := range tpu.V6e.ValidChipsPerHost(topo) {
		s, _ := tpu.NewSliceShape(tpu.V6e, "2x4", n)
		fmt.Println(s, "on", s.Hosts(), "×", s.MachineType().Name)
	}
	_, err := tpu.NewSliceShape(tpu.V6e, "2x2", 1)
	fmt.Println(err)
	// Output:
	// [4 8]
	// v6e 2x4 (4 chips per host) on 2 × ct6e-standard-4t
	// v6e 2x4 on 1 × ct6e-standard-8t
	// invalid chips per host 1 for v6e 2x2: no 1-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)
}

func ExampleGeneration_RayTopology() {
	for _, c := range []struct {
		g    tpu.Generation
		topo string
	}{{tpu.V6e, "2x8"}, {tpu.V7x, "1x1x1"}, {tpu.V7x, "16x16x16"}, {tpu.V6e, "4x4"}} {
		t := tpu.MustParseTopology(c.topo)
		fmt.Println(c.g, c.topo, "ray:", c.g.RayTopology(t), "gke:", c.g.GKETopology(t))
	}
	// Output:
	// v6e 2x8 ray: true gke: false
	// v7x 1x1x1 ray: false gke: true
	// v7x 16x16x16 ray: false gke: true
	// v6e 4x4 ray: true gke: true
}

func ExampleNewSubslice() {
	pool, _ := tpu.NewSliceShape(tpu.V6e, "16x16", 0)
	sub, err := tpu.NewSubslice(pool, "4x4")
	if err != nil {
		panic(err)
	}
	fmt.Println(sub, "×", sub.Count())
	hosts, _ := sub.Workers(1)
	fmt.Println("sub-slice 1 is parent workers", hosts)
	fmt.Println(sub.GKELabel(), sub.RayLabel())
	env, _ := tpu.DevicePluginEnv(sub.Shape, 0)
	fmt.Println(env[tpu.EnvTopology], env[tpu.EnvAcceleratorType], env[tpu.EnvHostBounds])
	// Output:
	// v6e 4x4 in v6e 16x16 × 16
	// sub-slice 1 is parent workers [2 3 10 11]
	// cloud.google.com/gke-tpu-slice-4x4-id ray.io/tpu-subslice-4x4
	// 4x4 v6e-16 2,2,1
}

func ExampleProcessEnv() {
	shape, _ := tpu.NewSliceShape(tpu.V7x, "2x2x2", 0)
	hosts := []string{"g-0-0.rc-headless", "g-0-1.rc-headless"}
	fmt.Println(shape.ProcessesPerHost(), "processes of", shape.ChipsPerProcess(), "chips per host")
	for p := range shape.ProcessesPerHost() {
		env, err := tpu.ProcessEnv(shape, "g-0", hosts, 1, p)
		if err != nil {
			panic(err)
		}
		fmt.Println(env[tpu.EnvWorkerID], env[tpu.EnvProcessPort], env[tpu.EnvVisibleChips], env[tpu.EnvHostBounds])
	}
	env, _ := tpu.ProcessEnv(shape, "g-0", hosts, 0, 0)
	fmt.Println(env[tpu.EnvProcessAddresses])
	// Output:
	// 2 processes of 2 chips per host
	// 2 8471 0,1 2,1,2
	// 3 8472 2,3 2,1,2
	// g-0-0.rc-headless:8471,g-0-0.rc-headless:8472,g-0-1.rc-headless:8471,g-0-1.rc-headless:8472
}
