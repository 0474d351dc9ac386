package local

import (
	"fmt"
	"maps"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// TPUSliceSpec adds simulated GKE TPU node pools: Count slices of one
// generation and topology, each its own node pool with one node per host,
// every host labelled as GKE and the TPU webhook would (see
// tpu.HostLabels) and holding Ray's TPU resources (tpu.HostResources): its
// chips as TPU, accelerator_type:<type>, TPU-<pod type>-head: 1 on worker
// 0 and, with NameResource, <slice name>: 1 on every host, so Ray-style
// reservations through the head resource and the slice name work against
// the simulator.
type TPUSliceSpec struct {
	// Generation is the TPU generation, e.g. "v6e".
	Generation string `json:"generation"`
	// Topology is the chip grid, e.g. "4x4".
	Topology string `json:"topology"`
	// Count is the number of slices; 0 means 1.
	Count int `json:"count,omitempty"`
	// ChipsPerHost overrides the default chips per host (ambiguous shapes
	// such as v6e 2x4).
	ChipsPerHost int `json:"chipsPerHost,omitempty"`
	// NamePrefix prefixes slice names; the default is the pod type, e.g.
	// "v6e-16". Slices are named <prefix>-<i>, hosts <slice>-w<worker>.
	NamePrefix string `json:"namePrefix,omitempty"`
	// Subslices are sub-slice topologies GKE labels the node pool for, such
	// as ["4x4"] on a v6e 16x16: every host gets the label
	// tpu.SubsliceLabel(topology) = "<slice>-<topology>-<index>", the ID
	// of the sub-slice it belongs to. Each must be a sub-slice of the
	// slice (tpu.SubsliceTopologies). Sub-slices can be reserved whether
	// or not they are listed here (backend.SliceRequest.Subslice).
	Subslices []string `json:"subslices,omitempty"`
	// NameResource adds Ray's <slice name>: 1 resource to every host, as
	// Ray's TPU accelerator manager does. It is off by default: each slice
	// then adds a resource kind that every resource vector of the
	// simulator carries, which slows large clusters; the
	// ray.io/tpu-slice-name label selects a slice's hosts without it.
	NameResource bool `json:"nameResource,omitempty"`
	// NoICIResiliency labels every host as GKE labels a slice created
	// without ICI resiliency (tpu.LabelGKEICIResiliency "false"), so its
	// hosts' ENABLE_ICI_RESILIENCY is "false" where the shape sets it (v4,
	// v5p and v7x from 4x4x4 up).
	NoICIResiliency bool `json:"noICIResiliency,omitempty"`
	// HostCPU and HostMemory are each host's CPUs and memory bytes;
	// defaults 8 and 64 GiB.
	HostCPU    float64 `json:"hostCPU,omitempty"`
	HostMemory float64 `json:"hostMemory,omitempty"`
}

// defaultHostCPU and defaultHostMemory size simulated TPU hosts.
const (
	defaultHostCPU    = 8
	defaultHostMemory = 64 << 30
)

// expandSlices expands TPU slice specs into their hosts.
func expandSlices(specs []TPUSliceSpec, budget int) ([]nodeDef, error) {
	const op = "create local cluster"
	var defs []nodeDef
	for i, s := range specs {
		shape, err := tpu.NewSliceShape(tpu.Generation(s.Generation), s.Topology, s.ChipsPerHost)
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArgument, op, "TPU slice spec %d: %w", i, err)
		}
		if s.Count < 0 {
			return nil, backend.Errorf(backend.InvalidArgument, op, "TPU slice spec %d: negative count %d", i, s.Count)
		}
		if n := max(1, s.Count); n > budget/shape.Hosts() {
			return nil, backend.Errorf(backend.InvalidArgument, op, "TPU slice spec %d: %d slices of %d hosts exceed the limit of %d nodes in a cluster (local.MaxNodes)", i, n, shape.Hosts(), MaxNodes)
		} else {
			budget -= n * shape.Hosts()
		}
		subs := make([]tpu.Subslice, 0, len(s.Subslices))
		for _, topo := range s.Subslices {
			sub, err := tpu.NewSubslice(shape, topo)
			if err != nil {
				return nil, backend.Errorf(backend.InvalidArgument, op, "TPU slice spec %d: %w", i, err)
			}
			subs = append(subs, sub)
		}
		prefix := s.NamePrefix
		if prefix == "" {
			prefix = shape.PodType()
		}
		cpu, mem := s.HostCPU, s.HostMemory
		if cpu == 0 {
			cpu = defaultHostCPU
		}
		if mem == 0 {
			mem = defaultHostMemory
		}
		// The hosts of one spec share their env map, which nobody
		// modifies: one map per host was a tenth of an 8,192-host
		// cluster's live heap.
		env := map[string]string{
			tpu.EnvAcceleratorType: acceleratorEnv(shape),
			tpu.EnvTopology:        shape.Topology.String(),
			tpu.EnvSkipMDSQuery:    "true",
		}
		for k := range max(1, s.Count) {
			slice := fmt.Sprintf("%s-%d", prefix, k)
			labels := subsliceLabels(slice, shape.Hosts(), subs)
			for w := range shape.Hosts() {
				host := fmt.Sprintf("%s-w%d", slice, w)
				res := backend.Resources(tpu.HostResources(shape, slice, w))
				if !s.NameResource {
					delete(res, slice)
				}
				res[backend.CPU], res[backend.Memory] = cpu, mem
				hl := tpu.HostLabels(shape, slice, slice, w)
				maps.Copy(hl, labels[w])
				if s.NoICIResiliency {
					hl[tpu.LabelGKEICIResiliency] = "false"
				}
				defs = append(defs, nodeDef{
					name:      host,
					resources: res,
					labels:    hl,
					tpu:       &cluster.TPUHost{Slice: slice, Shape: shape, WorkerID: w},
					env:       env,
				})
			}
		}
	}
	return defs, nil
}

// subsliceLabels returns each worker's GKE sub-slice labels: for every
// sub-slice topology, the ID "<slice>-<topology>-<index>" of the sub-slice
// holding the worker.
func subsliceLabels(slice string, hosts int, subs []tpu.Subslice) []map[string]string {
	out := make([]map[string]string, hosts)
	for w := range out {
		out[w] = map[string]string{}
	}
	for _, sub := range subs {
		for i := range sub.Count() {
			ws, _ := sub.Workers(i)
			for _, w := range ws {
				out[w][sub.GKELabel()] = cluster.SubsliceID(slice, sub.Shape.Topology, i)
			}
		}
	}
	return out
}

// acceleratorEnv is the TPU_ACCELERATOR_TYPE of a host of shape s.
func acceleratorEnv(s tpu.SliceShape) string {
	if s.Generation == tpu.V7x {
		return s.GKEPodType()
	}
	return s.PodType()
}
