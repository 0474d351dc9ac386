//go:build e2e

package kubernetes

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// The one change examples/slice needs to run on Kubernetes: its backend
// constructor.
const (
	localConstructor = `local.New(clusterSpec(), nil)`
	k8sConstructor   = `kubernetes.New(ctx, kubernetes.Config{Worker: kubernetes.WorkerConfig{Image: "goray.test/slice"}})`
	k8sImport        = "\t\"github.com/goray-dev/goray/backend/kubernetes\"\n"
)

// TestE2EExampleSlice builds examples/slice with only its backend
// constructor changed (local.New → kubernetes.New; its cluster spec stays,
// unused), runs it as a driver process against a control plane whose
// nodes are the example's simulated cluster as GKE node pools (the same
// names, labels and capacities), and checks that it prints what it
// prints on the simulator (testdata/output.txt), line for line; only the
// order of slices in its listings may differ.
func TestE2EExampleSlice(t *testing.T) {
	src, err := os.ReadFile("../../examples/slice/main.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../examples/slice/testdata/output.txt")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(src), localConstructor) != 1 {
		t.Fatalf("examples/slice/main.go no longer calls %s once", localConstructor)
	}
	prog := strings.Replace(string(src), localConstructor, k8sConstructor, 1)
	prog = strings.Replace(prog, "import (\n", "import (\n"+k8sImport, 1)

	// Build it inside this module (so that it resolves the same modules),
	// in a folder ./... ignores.
	dir, err := os.MkdirTemp(".", "_e2e_slice_")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "slice")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}

	cp := kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{"goray.test/slice": bin}})
	replaceNodes(t, cp, exampleNodes(t))

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+driverKubeconfig(t, cp))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("run the example: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("examples/slice ran on the control plane in %v", time.Since(t0))
	// The hosts' names in the env are what workers reach each other by:
	// node names on the simulator, the pods' DNS names here.
	if !strings.Contains(stdout.String(), "TPU_WORKER_HOSTNAMES=r") || !strings.Contains(stdout.String(), ".default.svc") {
		t.Errorf("the env does not name the worker pods by their DNS names:\n%s", stdout.String())
	}
	got, wantLines := sortedLines(hostNamesMasked(stdout.String())), sortedLines(hostNamesMasked(string(want)))
	if !slices.Equal(got, wantLines) {
		t.Errorf("output differs from the simulator's:\n%s\nwant (in any order of lines):\n%s", stdout.String(), want)
	}
	if err := cp.WaitForPodsGone(ctx, "default", LabelCluster); err != nil {
		t.Errorf("worker pods left behind: %v", err)
	}
}

// hostNames matches the values of the env variables that name hosts.
var hostNames = regexp.MustCompile(`(TPU_WORKER_HOSTNAMES|TPU_PROCESS_ADDRESSES|MEGASCALE_COORDINATOR_ADDRESS)=\S+`)

// hostNamesMasked replaces the host names in s's env by a placeholder.
func hostNamesMasked(s string) string { return hostNames.ReplaceAllString(s, "$1=<hosts>") }

// sortedLines returns the lines of s, sorted, each with the shapes of a
// "(the cluster has A, B, C)" list sorted too: shapes are listed in the
// order the slices were found, which on Kubernetes is the watch's.
func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		l = strings.TrimRight(l, " ")
		if a := strings.Index(l, "(the cluster has "); a >= 0 && strings.HasSuffix(l, ")") {
			items := strings.Split(l[a+len("(the cluster has "):len(l)-1], ", ")
			slices.Sort(items)
			l = l[:a] + "(the cluster has " + strings.Join(items, ", ") + ")"
		}
		lines[i] = l
	}
	slices.Sort(lines)
	return lines
}

// exampleNodes returns the nodes of examples/slice's simulated cluster
// (its clusterSpec, repeated here since package main cannot be imported),
// as the simulator labels them.
func exampleNodes(t *testing.T) []backendtest.Node {
	t.Helper()
	spec := local.ClusterSpec{
		Nodes: []local.NodeSpec{{Name: "cpu", Count: 4, Resources: local.Resources{ray.CPU: 16, ray.Memory: 64 << 30}}},
		TPUSlices: []local.TPUSliceSpec{
			{Generation: "v6e", Topology: "4x4", Count: 3},
			{Generation: "v5p", Topology: "2x2x2", Count: 1},
			{Generation: "v7x", Topology: "2x2x2", Count: 1},
			{Generation: "v6e", Topology: "8x8", Count: 1, Subslices: []string{"4x4"}},
		},
	}
	b, err := local.New(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(t.Context(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	snap, err := c.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var nodes []backendtest.Node
	for _, n := range snap.Nodes {
		nodes = append(nodes, backendtest.Node{Name: n.Name, Labels: n.Labels, Resources: n.Capacity})
	}
	return nodes
}
