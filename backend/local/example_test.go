package local_test

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// A simulated cluster from a JSON cluster file: two CPU nodes and one v6e
// 2x4 slice served as two 4-chip hosts.
func ExampleNew() {
	ctx := context.Background()
	spec, err := local.ParseClusterSpec([]byte(`{
	  "nodes": [{"name": "cpu", "count": 2, "resources": {"CPU": 8, "memory": "32GiB"}, "labels": {"pool": "cpu"}}],
	  "tpuSlices": [{"generation": "v6e", "topology": "2x4", "chipsPerHost": 4}]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := local.New(spec, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	state, err := c.Snapshot(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range state.Nodes {
		fmt.Println(n.Name, n.Capacity)
	}
	// Output:
	// cpu-0 {CPU: 8, memory: 32GiB}
	// cpu-1 {CPU: 8, memory: 32GiB}
	// v6e-8-0-w0 {CPU: 8, TPU: 4, TPU-v6e-8-head: 1, accelerator_type:TPU-V6E: 1, memory: 64GiB}
	// v6e-8-0-w1 {CPU: 8, TPU: 4, accelerator_type:TPU-V6E: 1, memory: 64GiB}
}

// Cluster files are checked when they are read and when the cluster is
// built; the errors say what is valid.
func ExampleParseClusterSpec() {
	_, err := local.ParseClusterSpec([]byte(`{"nodes": [{"name": "cpu", "cpus": 8}]}`))
	fmt.Println(err)

	spec, err := local.ParseClusterSpec([]byte(`{"tpuSlices": [{"generation": "v6e", "topology": "4x5"}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = local.New(spec, nil)
	fmt.Println(ray.CodeOf(err))
	fmt.Println(err)
	// Output:
	// parse cluster spec: json: unknown field "cpus"
	// InvalidArgument
	// create local cluster: TPU slice spec 0: topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
}
