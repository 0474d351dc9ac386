// Package tpuvms is a goray backend written outside goray's repository,
// on its public cluster runtime: the cluster is a static list of TPU VMs
// (and CPU machines) read from a JSON file, work runs in this process.
// docs/backends.md walks through it; scripts/check-publish.sh builds it
// against goray fetched from a module proxy and runs goray's conformance
// suites on it.
package tpuvms

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// VM is one machine of the file.
type VM struct {
	Name   string            `json:"name"`
	CPUs   float64           `json:"cpus"`
	Labels map[string]string `json:"labels,omitempty"`
	// Resources are custom resources, such as {"special": 1}.
	Resources map[string]float64 `json:"resources,omitempty"`
	// A TPU VM names its slice and says which host of it it is.
	Slice           string `json:"slice,omitempty"`
	AcceleratorType string `json:"acceleratorType,omitempty"` // "v6e", "v5p", "tpu7x", ...
	Topology        string `json:"topology,omitempty"`        // "4x4"
	ChipsPerHost    int    `json:"chipsPerHost,omitempty"`
	WorkerID        int    `json:"workerId,omitempty"`
}

// New reads the VM list at path and returns a backend for ray.NewCluster.
func New(path string) (backend.Backend, error) {
	const op = "create tpuvms backend"
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "%w", err)
	}
	var vms []VM
	if err := json.Unmarshal(data, &vms); err != nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "%s: %w", path, err)
	}
	nodes := make([]cluster.Node, 0, len(vms))
	for _, vm := range vms {
		n, err := node(vm)
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArgument, op, "%s: %w", path, err)
		}
		nodes = append(nodes, n)
	}
	// The runtime's own checks, so a bad list fails here.
	if err := cluster.CheckSlices(op, nodes); err != nil {
		return nil, err
	}
	return cluster.New(cluster.NewStaticSource(nodes), cluster.GoroutineRunner{}, cluster.Options{Nodes: nodes})
}

// node turns a VM into the runtime's node: a TPU VM gets its typed TPU
// host, GKE's and Ray's labels and Ray's TPU resources, as on GKE.
func node(vm VM) (cluster.Node, error) {
	n := cluster.Node{Name: vm.Name, Resources: backend.Resources{backend.CPU: vm.CPUs}, Labels: map[string]string{}}
	for k, v := range vm.Labels {
		n.Labels[k] = v
	}
	for k, v := range vm.Resources {
		n.Resources[k] = v
	}
	if vm.Slice == "" {
		return n, nil
	}
	shape, err := tpu.NewSliceShape(tpu.Generation(vm.AcceleratorType), vm.Topology, vm.ChipsPerHost)
	if err != nil {
		return n, fmt.Errorf("TPU VM %q: %w", vm.Name, err)
	}
	for k, v := range tpu.HostResources(shape, vm.Slice, vm.WorkerID) {
		n.Resources[k] = v
	}
	for k, v := range tpu.HostLabels(shape, vm.Slice, vm.Slice, vm.WorkerID) {
		n.Labels[k] = v
	}
	n.TPU = &cluster.TPUHost{Slice: vm.Slice, Shape: shape, WorkerID: vm.WorkerID}
	return n, nil
}
