package local

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// ClusterSpec describes a simulated cluster. Build one in Go, or load a JSON
// cluster file with [LoadClusterSpec]:
//
//	{"nodes": [
//	  {"name": "cpu", "count": 4, "resources": {"CPU": 8, "memory": "32GiB"}},
//	  {"name": "gpu-0", "resources": {"CPU": 16, "GPU": 2}, "labels": {"pool": "gpu"}}
//	]}
type ClusterSpec struct {
	Nodes []NodeSpec `json:"nodes"`
	// TPUSlices adds GKE-style TPU node pools; see [TPUSliceSpec].
	TPUSlices []TPUSliceSpec `json:"tpuSlices,omitempty"`
}

// Resources is backend.Resources.
//
// Deprecated: write a node's capacity as ray.Resources{ray.CPU: 8}, the
// type a program already uses for what its work asks for ([NodeSpec]'s
// Resources takes it, and backend.Resources too). One name per thing:
// ray.Resources in programs, backend.Resources in backends.
type Resources = backend.Resources

// NodeSpec describes one node, or Count identical nodes.
type NodeSpec struct {
	// Name is the node's name. With Count > 1, nodes are named Name-0,
	// Name-1, ...
	Name string `json:"name"`
	// Count replicates the node; 0 means 1.
	Count int `json:"count,omitempty"`
	// Resources is the node's capacity: resource names (ray.CPU,
	// ray.Memory, ray.TPU or any custom name) to amounts. Write it as
	// ray.Resources{...} (a backend may pass backend.Resources); the field
	// is a plain map so that either assigns to it.
	Resources map[string]float64 `json:"-"`
	// Labels are the node's labels, matched by selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// Env is added to the runtime env of all work on the node.
	Env map[string]string `json:"env,omitempty"`
}

type nodeSpecJSON struct {
	Name      string            `json:"name"`
	Count     int               `json:"count,omitempty"`
	Resources map[string]any    `json:"resources"`
	Labels    map[string]string `json:"labels,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// UnmarshalJSON reads resources as numbers or quantity strings ("32GiB").
func (n *NodeSpec) UnmarshalJSON(data []byte) error {
	var j nodeSpecJSON
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	res := backend.Resources{}
	for k, v := range j.Resources {
		switch x := v.(type) {
		case float64:
			res[k] = x
		case string:
			q, err := backend.ParseQuantity(x)
			if err != nil {
				return fmt.Errorf("node %q resource %q: %w", j.Name, k, err)
			}
			res[k] = q
		default:
			return fmt.Errorf("node %q resource %q: want a number or a quantity string, got %v", j.Name, k, v)
		}
	}
	*n = NodeSpec{Name: j.Name, Count: j.Count, Resources: res, Labels: j.Labels, Env: j.Env}
	return nil
}

// MarshalJSON writes the node with its resources.
func (n NodeSpec) MarshalJSON() ([]byte, error) {
	res := map[string]any{}
	for k, v := range n.Resources {
		res[k] = v
	}
	return json.Marshal(nodeSpecJSON{Name: n.Name, Count: n.Count, Resources: res, Labels: n.Labels, Env: n.Env})
}

// ParseClusterSpec parses a JSON cluster file. Unknown fields are errors.
func ParseClusterSpec(data []byte) (ClusterSpec, error) {
	var s ClusterSpec
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return ClusterSpec{}, backend.Errorf(backend.InvalidArgument, "parse cluster spec", "%v", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return ClusterSpec{}, backend.Errorf(backend.InvalidArgument, "parse cluster spec", "unexpected data after the cluster spec")
	}
	return s, nil
}

// LoadClusterSpec reads a JSON cluster file.
func LoadClusterSpec(path string) (ClusterSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ClusterSpec{}, backend.Errorf(backend.InvalidArgument, "load cluster spec "+path, "%w", err)
	}
	s, err := ParseClusterSpec(data)
	if err != nil {
		return ClusterSpec{}, backend.Reop(backend.InvalidArgument, "load cluster spec "+path, err)
	}
	return s, nil
}

// nodeDef is a fully expanded node.
// MaxNodes is the largest cluster the simulator builds: a spec (or cluster
// file) whose nodes, counts included, and TPU hosts add up to more is
// refused with InvalidArgument before anything is allocated.
const MaxNodes = 10_000

type nodeDef struct {
	name      string
	resources backend.Resources
	labels    map[string]string
	env       map[string]string
	tpu       *cluster.TPUHost // a host of a TPUSliceSpec's slice
}

// expand validates the spec and expands counts and TPU slices into nodes.
func (s ClusterSpec) expand() ([]nodeDef, error) {
	const op = "create local cluster"
	var defs []nodeDef
	seen := map[string]bool{}
	add := func(d nodeDef) error {
		if d.name == "" {
			return backend.Errorf(backend.InvalidArgument, op, "node with empty name")
		}
		if seen[d.name] {
			return backend.Errorf(backend.InvalidArgument, op, "duplicate node name %q", d.name)
		}
		if err := d.resources.Validate(); err != nil {
			return backend.Errorf(backend.InvalidArgument, op, "node %q: %w", d.name, backend.Cause(err))
		}
		seen[d.name] = true
		defs = append(defs, d)
		return nil
	}
	budget := MaxNodes
	for i, n := range s.Nodes {
		if n.Name == "" {
			return nil, backend.Errorf(backend.InvalidArgument, op, "node spec %d has an empty name", i)
		}
		if n.Count < 0 {
			return nil, backend.Errorf(backend.InvalidArgument, op, "node %q: negative count %d", n.Name, n.Count)
		}
		// Checked before anything is built: a tiny file must not make
		// the simulator allocate a huge cluster.
		if c := max(1, n.Count); c > budget {
			return nil, backend.Errorf(backend.InvalidArgument, op, "node %q: count %d exceeds the limit of %d nodes in a cluster (local.MaxNodes)", n.Name, n.Count, MaxNodes)
		}
		budget -= max(1, n.Count)
		host, err := labelledHost(n)
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArgument, op, "%w", err)
		}
		if host != nil && n.Count > 1 {
			return nil, backend.Errorf(backend.InvalidArgument, op, "node %q: count %d of a TPU host (label %s): each host of a slice is a node of its own", n.Name, n.Count, tpu.LabelSliceName)
		}
		if n.Count <= 1 {
			res := backend.Resources(n.Resources).Clone()
			if host != nil && res == nil {
				res = backend.Resources{}
			}
			if host != nil {
				// A labelled TPU host carries Ray's per-host resources
				// (the slice's name, worker 0's head resource), as a host
				// declared in TPUSlices does; those the spec names stay.
				for k, v := range tpu.HostResources(host.Shape, host.Slice, host.WorkerID) {
					if _, ok := res[k]; !ok {
						res[k] = v
					}
				}
			}
			if err := add(nodeDef{name: n.Name, resources: res, labels: maps.Clone(n.Labels), env: maps.Clone(n.Env), tpu: host}); err != nil {
				return nil, err
			}
			continue
		}
		for i := range n.Count {
			if err := add(nodeDef{name: fmt.Sprintf("%s-%d", n.Name, i), resources: backend.Resources(n.Resources).Clone(), labels: maps.Clone(n.Labels), env: maps.Clone(n.Env)}); err != nil {
				return nil, err
			}
		}
	}
	tpuDefs, err := expandSlices(s.TPUSlices, budget)
	if err != nil {
		return nil, err
	}
	for _, d := range tpuDefs {
		if err := add(d); err != nil {
			return nil, err
		}
	}
	if len(defs) == 0 {
		return nil, backend.Errorf(backend.InvalidArgument, op, "cluster spec has no nodes")
	}
	return defs, nil
}

// labelledHost reads the TPU host of a node spec from the labels GKE and
// Ray put on real hosts (tpu.HostLabels): the slice name
// (tpu.LabelSliceName), the GKE accelerator and topology, and the worker
// ID; its chips per host are its TPU resource. A node without a slice
// name is no TPU host (nil).
func labelledHost(n NodeSpec) (*cluster.TPUHost, error) {
	slice := n.Labels[tpu.LabelSliceName]
	if slice == "" {
		return nil, nil
	}
	chips := int(n.Resources[backend.TPU])
	shape, err := tpu.NewSliceShape(tpu.Generation(n.Labels[tpu.LabelGKEAccelerator]), n.Labels[tpu.LabelGKETopology], chips)
	if err != nil {
		return nil, fmt.Errorf("node %q of TPU slice %q (labels %s, %s; TPU resource %d): %w",
			n.Name, slice, tpu.LabelGKEAccelerator, tpu.LabelGKETopology, chips, err)
	}
	wid, err := strconv.Atoi(n.Labels[tpu.LabelWorkerID])
	if err != nil || wid < 0 || wid >= shape.Hosts() {
		return nil, fmt.Errorf("node %q of TPU slice %q: label %s=%q is not a worker ID in 0..%d",
			n.Name, slice, tpu.LabelWorkerID, n.Labels[tpu.LabelWorkerID], shape.Hosts()-1)
	}
	return &cluster.TPUHost{Slice: slice, Shape: shape, WorkerID: wid}, nil
}
