//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// PodEnv is what a worker pod reports of its own process environment.
type PodEnv struct {
	Pod, WorkerID, Hostnames, Name, Addr string
}

// podEnvTask runs in a worker pod and reads the pod's environment (not
// the call's runtime env): what the container was started with.
var podEnvTask = ray.NewTask("k8stest.podenv", func(ctx context.Context, _ struct{}) (PodEnv, error) {
	return PodEnv{Pod: os.Getenv("POD_NAME"), WorkerID: os.Getenv(tpu.EnvWorkerID),
		Hostnames: os.Getenv(tpu.EnvWorkerHostnames), Name: os.Getenv("TPU_NAME")}, nil
})

func runPodEnv(t *testing.T, exec backend.Executor, node string, group backend.PlacementGroupID) PodEnv {
	t.Helper()
	v, err := exec.RunTask(t.Context(), "k8stest.podenv", backend.Value{Data: []byte("{}")}, &backend.RuntimeInfo{Node: node, Task: "k8stest.podenv", Placement: backend.Placement{Group: group}})
	if err != nil {
		t.Fatalf("run on %s: %v", node, err)
	}
	var env PodEnv
	if err := json.Unmarshal(v.Data, &env); err != nil {
		t.Fatal(err)
	}
	return env
}

// TestE2EWorkerPods discovers a v6e 2x4 slice (two 4-chip hosts) and two
// CPU nodes from a real apiserver, claims the slice, starts one real
// worker pod per host (this test binary in worker mode, scheduled by
// kube-scheduler onto its node with 4 google.com/tpu) and runs work in
// them; a deleted pod loses its host; everything is deleted at the end.
// The driver runs as the RBAC identity of deploy/rbac.yaml.
func TestE2EWorkerPods(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 2})
	is.NoErr(err)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)

	cfg := testConfig()
	cfg.Worker.Image = workerImage
	cfg.Worker.StartTimeout = time.Minute
	leases, err := NewLeases(client, cfg)
	is.NoErr(err)
	src, err := NewSource(client, cfg, "e2e", leases)
	is.NoErr(err)
	sink := newRecordSink()
	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(sctx, sink) })
	defer func() { stop(); wg.Wait() }()
	ev := sink.waitFor(t, 4)
	nodes := map[string]cluster.Node{}
	for _, e := range ev {
		nodes[e.name] = e.node
	}
	is.Equal(nodes["slice-a-1"].Labels[tpu.LabelWorkerID], "1")
	is.Equal(nodes["slice-a-1"].Resources[backend.TPU], 4.0)
	is.True(nodes["cpu-0"].Resources[backend.CPU] > 0)

	runner, err := NewRunner(client, cfg, "e2e")
	is.NoErr(err)
	lost := &lostRecorder{lost: map[string]string{}, ch: make(chan string, 16)}
	exec, err := runner.Start(ctx, ray.NewExecutor(ray.JSON), lost.report)
	is.NoErr(err)
	defer runner.Close()
	for _, n := range nodes {
		is.NoErr(runner.NodeUp(ctx, n))
	}

	// Claim and reserve the slice with the env the runtime would give.
	hosts := []string{"slice-a-0", "slice-a-1"}
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"slice-a"}, Hosts: [][]string{hosts}}
	is.NoErr(src.ClaimSlices(ctx, claim))
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x4", 4)
	is.NoErr(err)
	env := map[string]map[string]string{}
	names := runner.HostNames(claim)[0]
	for i, h := range hosts {
		env[h], err = tpu.WorkerEnv(shape, "slice-a", names, i)
		is.NoErr(err)
	}
	t0 := time.Now()
	is.NoErr(runner.Reserved(ctx, claim, env))
	t.Logf("v6e 2x4 reserved, 2 worker pods connected in %v", time.Since(t0))
	for i, h := range hosts {
		got := runPodEnv(t, exec, h, 1) // the reservation's work, in its group
		is.Equal(got.WorkerID, string(rune('0'+i)))
		is.Equal(got.Name, "slice-a")
		is.Equal(got.Hostnames, "r1-s0-w0.goray-e2e.default.svc,r1-s0-w1.goray-e2e.default.svc")
		pod, err := cp.Client().CoreV1().Pods("default").Get(ctx, got.Pod, metav1.GetOptions{})
		is.NoErr(err)
		is.Equal(pod.Spec.NodeName, h) // kube-scheduler put it on its host
	}
	// CPU work gets its own pod on its node.
	cpuEnv := runPodEnv(t, exec, "cpu-1", 0)
	is.Equal(cpuEnv.WorkerID, "")
	pod, err := cp.Client().CoreV1().Pods("default").Get(ctx, cpuEnv.Pod, metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(pod.Spec.NodeName, "cpu-1")

	// A worker pod deleted by someone else (an eviction) loses its host.
	is.NoErr(cp.Client().CoreV1().Pods("default").Delete(ctx, "goray-e2e-r1-s0-w1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	select {
	case n := <-lost.ch:
		is.Equal(n, "slice-a-1")
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted pod's host was not reported lost")
	}

	// A deleted node is lost for the source.
	is.NoErr(cp.Client().CoreV1().Nodes().Delete(ctx, "cpu-0", metav1.DeleteOptions{}))
	e := sink.waitForEvent(t, "lost cpu-0")
	is.True(strings.Contains(e.err.Error(), "deleted"))

	runner.Released(claim)
	is.NoErr(src.ReleaseSlices(ctx, claim))
	is.NoErr(runner.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster+"=e2e"))
	_, err = cp.Client().CoordinationV1().Leases("default").Get(ctx, LeaseName("slice-a"), metav1.GetOptions{})
	is.True(err != nil) // the Lease is gone
	_, err = cp.Client().CoreV1().Secrets("default").Get(ctx, "goray-e2e", metav1.GetOptions{})
	is.True(err != nil)
}

// envPair is a task's TPU env as ray.Runtime reports it and as its
// process was started with.
type envPair struct{ Runtime, Process map[string]string }

var envPairTask = ray.NewTask("k8stest.envpair", func(ctx context.Context, _ struct{}) (envPair, error) {
	rc, _ := ray.Runtime(ctx)
	p := envPair{Runtime: map[string]string{}, Process: map[string]string{}}
	for k, v := range rc.Environ() {
		if strings.HasPrefix(k, "TPU_") || strings.HasPrefix(k, "MEGASCALE_") {
			p.Runtime[k] = v
			p.Process[k] = os.Getenv(k)
		}
	}
	return p, nil
})

// TestE2EOneEnvPerHost: in a worker pod of a 2-slice reservation, the TPU
// env a task reads from ray.Runtime is the pod's process env, and it
// equals SlicePlacementGroup.WorkerEnv, with the pods' DNS names (which
// resolve in the cluster), never node names.
func TestE2EOneEnvPerHost(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	_, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, nil)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4, NumSlices: 2})
	is.NoErr(err)
	defer spg.Release(ctx)
	got, err := ray.RunOnSlice(ctx, spg, envPairTask, struct{}{})
	is.NoErr(err)
	is.Equal(len(got), 4)
	for i, p := range got {
		is.Equal(p.Runtime, p.Process) // ray.Runtime agrees with os.Getenv
		for k, v := range spg.WorkerEnv(i) {
			if strings.HasPrefix(k, "TPU_") || strings.HasPrefix(k, "MEGASCALE_") {
				is.Equal(p.Process[k], v) // and with the reservation's env
			}
		}
		for _, h := range strings.Split(p.Process[tpu.EnvWorkerHostnames], ",") {
			is.True(strings.Contains(h, ".goray-") && strings.HasSuffix(h, ".default.svc")) // DNS names, not node names
		}
		co := p.Process[tpu.EnvMegascaleCoordinatorAddress]
		is.True(strings.Contains(co, ".goray-") && strings.HasSuffix(co, ".default.svc"))
	}
}
