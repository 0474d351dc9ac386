package tpuvms

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/backend/cluster/clustertest"
	"github.com/goray-dev/goray/tpu"
)

// vms turns the conformance suite's nodes (TPU hosts carry GKE's and
// Ray's labels) into the file's VMs.
func vms(nodes []backendtest.Node) []VM {
	var out []VM
	for _, n := range nodes {
		vm := VM{Name: n.Name, CPUs: n.Resources[backend.CPU], Labels: n.Labels, Resources: map[string]float64{}}
		for k, v := range n.Resources {
			if k != backend.CPU && k != backend.TPU && k != backend.Memory {
				vm.Resources[k] = v
			}
		}
		if s := n.Labels[tpu.LabelSliceName]; s != "" {
			vm.Slice = s
			vm.AcceleratorType = n.Labels[tpu.LabelGKEAccelerator]
			vm.Topology = n.Labels[tpu.LabelGKETopology]
			vm.ChipsPerHost = int(n.Resources[backend.TPU])
			vm.WorkerID, _ = strconv.Atoi(n.Labels[tpu.LabelWorkerID])
		}
		out = append(out, vm)
	}
	return out
}

func write(t *testing.T, vms []VM) string {
	t.Helper()
	data, err := json.Marshal(vms)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vms.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConformance(t *testing.T) {
	backendtest.RunConformanceTests(t, backendtest.Harness{
		New: func(t *testing.T, nodes []backendtest.Node) backend.Backend {
			b, err := New(write(t, vms(nodes)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Capabilities: backendtest.AllCapabilities,
	})
}

func TestSource(t *testing.T) {
	clustertest.TestSource(t, clustertest.SourceHarness{
		New: func(t *testing.T) (cluster.NodeSource, []cluster.Node) {
			var nodes []cluster.Node
			for _, vm := range []VM{
				{Name: "cpu", CPUs: 4},
				{Name: "a-w0", CPUs: 8, Slice: "a", AcceleratorType: "v6e", Topology: "2x4", ChipsPerHost: 4, WorkerID: 0},
				{Name: "a-w1", CPUs: 8, Slice: "a", AcceleratorType: "v6e", Topology: "2x4", ChipsPerHost: 4, WorkerID: 1},
			} {
				n, err := node(vm)
				if err != nil {
					t.Fatal(err)
				}
				nodes = append(nodes, n)
			}
			return cluster.NewStaticSource(nodes), nodes
		},
		Faults: true,
	})
}

func TestBadList(t *testing.T) {
	_, err := New(write(t, []VM{{Name: "a-w0", CPUs: 8, Slice: "a", AcceleratorType: "v6e", Topology: "4x4", ChipsPerHost: 4}}))
	if backend.CodeOf(err) != backend.InvalidArgument {
		t.Fatalf("a slice missing 3 of its 4 hosts: got %v, want InvalidArgument", err)
	}
}
