//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/tpu"
)

// TestE2EConformance runs the whole backend/backendtest suite against the
// Kubernetes backend on one real control plane: for each test the
// cluster's nodes are replaced by the ones it asks for (TPU hosts as
// simulated GKE node pools, CPU nodes, labels and custom resources as
// node labels and the goray.dev/resources annotation), and the backend
// runs its work in real worker pods (this test binary in worker mode),
// as the RBAC identity of deploy/rbac.yaml.
func TestE2EConformance(t *testing.T) {
	cp := startHarness(t)
	driver, err := k8s.NewForConfig(driverConfig(t, cp))
	if err != nil {
		t.Fatal(err)
	}
	var pods atomic.Int64
	t.Cleanup(func() {
		t.Logf("the suite ran its work in %d worker pods", pods.Load())
		if pods.Load() == 0 {
			t.Error("no worker pod was created")
		}
	})
	backendtest.RunConformanceTests(t, backendtest.Harness{
		New: func(t *testing.T, nodes []backendtest.Node) backend.Backend {
			replaceNodes(t, cp, nodes)
			cfg := testConfig()
			cfg.Identity = ""
			cfg.Client = driver
			cfg.Worker.Image = workerImage
			cfg.Worker.StartTimeout = time.Minute
			b, err := New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pods.Add(b.runner.created.Load()) })
			return b
		},
		Capabilities: conformanceCapabilities(),
		// Every reservation starts real worker pods (processes built with
		// -race, dialled over mutual TLS): 4 pods for each of Contention's
		// reservations, 2 rounds of its 8 goroutines on 2 slices (16
		// reservations; 5 rounds took 49 s at load 15).
		Patience:         time.Minute,
		ContentionRounds: 2,
	})
}

// conformanceCapabilities are the suite's capabilities on this backend:
// all of them (chips outside reservations on hosts the driver claims).
func conformanceCapabilities() backendtest.Capabilities {
	return backendtest.AllCapabilities
}

// replaceNodes deletes every node of the control plane and creates the
// given ones: TPU hosts keep their names (<slice>-<worker>) and become
// simulated GKE node pools; each CPU node is a harness node named
// k8s-<name>-0 that the runtime knows by its test name (LabelName).
// Labels are node labels, custom resources the goray.dev/resources
// annotation.
func replaceNodes(t *testing.T, cp *kubeharness.ControlPlane, nodes []backendtest.Node) {
	t.Helper()
	ctx := t.Context()
	admin := cp.Client()
	old, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range old.Items {
		if err := admin.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		t.Fatalf("old nodes not gone: %v", err)
	}
	var slices []string
	bySlice := map[string][]backendtest.Node{}
	for _, n := range nodes {
		if slice := n.Labels[tpu.LabelSliceName]; slice != "" {
			if bySlice[slice] == nil {
				slices = append(slices, slice)
			}
			bySlice[slice] = append(bySlice[slice], n)
		}
	}
	quantities := func(r backend.Resources) (cpu, mem string) {
		cpu = strconv.FormatFloat(r[backend.CPU], 'f', -1, 64)
		if m := r[backend.Memory]; m > 0 {
			mem = strconv.FormatFloat(m, 'f', 0, 64)
		}
		return cpu, mem
	}
	harnessName := map[string]string{} // test name → harness node name
	for _, slice := range slices {
		hosts := bySlice[slice]
		for _, n := range hosts {
			wid, err := strconv.Atoi(n.Labels[tpu.LabelWorkerID])
			if err != nil {
				t.Fatalf("TPU node %q: label %s: %v", n.Name, tpu.LabelWorkerID, err)
			}
			harnessName[n.Name] = fmt.Sprintf("%s-%d", slice, wid)
		}
		first := hosts[0]
		cpu, mem := quantities(first.Resources)
		if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{
			Name: slice, Generation: first.Labels[tpu.LabelGKEAccelerator], Topology: first.Labels[tpu.LabelGKETopology],
			ChipsPerHost: int(first.Resources[backend.TPU]), CPU: cpu, Memory: mem, Hosts: len(hosts),
		}); err != nil {
			t.Fatalf("create TPU node pool %s: %v", slice, err)
		}
	}
	for _, n := range nodes {
		name := n.Name
		labels := maps.Clone(n.Labels)
		if h := harnessName[n.Name]; h != "" && h != n.Name {
			name = h
			if labels == nil {
				labels = map[string]string{}
			}
			labels[LabelName] = n.Name // the runtime knows it by the test's name
		}
		if n.Labels[tpu.LabelSliceName] == "" {
			cpu, mem := quantities(n.Resources)
			created, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "k8s-" + n.Name, Count: 1, CPU: cpu, Memory: mem,
				Labels: map[string]string{LabelName: n.Name}})
			if err != nil {
				t.Fatalf("create node %s: %v", n.Name, err)
			}
			name = created[0].Name
		}
		extra := map[string]float64{}
		for k, v := range n.Resources {
			if k != backend.CPU && k != backend.Memory && k != backend.TPU {
				extra[k] = v
			}
		}
		if len(labels) == 0 && len(extra) == 0 {
			continue
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(node.Labels, labels)
		if len(extra) > 0 {
			b, _ := json.Marshal(extra)
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[AnnotationResources] = string(b)
		}
		if _, err := admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("label node %s: %v", name, err)
		}
	}
}
