//go:build e2e

package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// k8sAllReduce sums (rank+1) over every rank for iters iterations,
// checking each host's TPU env names its pods by their DNS names, which
// resolve in the pod (cluster DNS), and reports the vector's first element.
var k8sAllReduce = train.NewLoop("k8stest.allreduce", func(ctx context.Context, w *train.Worker, iters int) error {
	for _, h := range strings.Split(w.Getenv("TPU_WORKER_HOSTNAMES"), ",") {
		if !strings.HasSuffix(h, ".svc") {
			return &train.WorkerFailedError{Rank: w.Rank(), Cause: "TPU_WORKER_HOSTNAMES names " + h + ", not a pod's DNS name"}
		}
		// A pod's name is in cluster DNS once the EndpointSlice of its
		// Service has its IP, which may come a moment after the pods of a
		// slice start: look up as JAX does, until a deadline.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			_, err := net.DefaultResolver.LookupHost(ctx, h)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return &train.WorkerFailedError{Rank: w.Rank(), Cause: "TPU_WORKER_HOSTNAMES: " + err.Error()}
			}
		}
	}
	state := make([]float64, 4)
	for it := w.Iteration(); it < iters; it++ {
		xs := []float64{float64(w.Rank() + 1), 1, 1, 1}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		for i := range state {
			state[i] += xs[i]
		}
		if err := w.Report(ctx, train.Metrics{"sum": state[0], "ranks": xs[1]}, nil); err != nil {
			return err
		}
	}
	return nil
})

// TestE2ETrain: train on 2 × v6e 4x4 (8 worker pods, each in its own
// network namespace with cluster DNS) on a real control plane, with the
// rendezvous where the backend says workers reach the driver
// (Config.DriverHost: the test process is outside the cluster).
//
//   - A loop: every rank joins, AllReduce sums across the 8 pods, the result
//     is exact.
//
//   - A python3 program per host (train.NewProgram, train/testdata/host.py):
//     each resolves every name of its slice's TPU_WORKER_HOSTNAMES and
//     MEGASCALE_COORDINATOR_ADDRESS through CoreDNS (its own name to its
//     pod IP) and meets the other ranks at
//     JAX_COORDINATOR_ADDRESS, as jax.distributed.initialize would.
//
//   - A rendezvous on 127.0.0.1, which no pod reaches: Fit fails within
//     seconds naming the address and RunConfig.Rendezvous.
//
// After each, the slices and pods are released.
func TestE2ETrain(t *testing.T) {
	ctx := t.Context()
	cp, c := slicesCluster(t, "4x4", []string{"slice-a", "slice-b"}, nil)
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2}
	released := func(t *testing.T) {
		is := is.New(t)
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		for _, st := range states {
			is.Equal(st.ReservedBy, ray.PlacementGroupID(0))
		}
	}

	t.Run("allreduce", func(t *testing.T) {
		is := is.New(t)
		tr, err := train.New(c, k8sAllReduce, 5, scaling, train.RunConfig{Name: "e2e", Progress: train.ProgressOff})
		is.NoErr(err)
		res, err := tr.Fit(ctx)
		is.NoErr(err)
		is.Equal(res.Metrics["ranks"], 8.0)  // 8 pods took part
		is.Equal(res.Metrics["sum"], 5*36.0) // 5 iterations of 1+2+...+8
		released(t)
	})

	t.Run("python program", func(t *testing.T) {
		is := is.New(t)
		python, script := pythonAndHostScript(t)
		var out bytes.Buffer
		tr, err := train.NewProgram(c, train.Program{Path: python, Args: []string{script, "meet"},
			Env: map[string]string{"EXTRA": "yes", "CHECK_DNS": "1"}},
			scaling, train.RunConfig{Name: "e2e-program", Progress: train.ProgressOff, Output: &out})
		is.NoErr(err)
		_, err = tr.Fit(ctx)
		lines := out.String()
		if err != nil || strings.Contains(lines, "BAD") {
			t.Fatalf("Fit: %v; output:\n%s", err, lines)
		}
		is.Equal(strings.Count(lines, "env ok"), 8)
		is.Equal(strings.Count(lines, "resolved 4 host names"), 8) // every pod resolved every name of its slice
		is.Equal(strings.Count(lines, "met the coordinator"), 7)
		is.True(strings.Contains(lines, "[rank 0] coordinator met ranks [1, 2, 3, 4, 5, 6, 7]"))
		released(t)
	})

	t.Run("rendezvous the pods cannot reach", func(t *testing.T) {
		is := is.New(t)
		// 127.0.0.1 is each pod's own loopback: the driver listens on its
		// own, which no pod reaches.
		tr, err := train.New(c, k8sAllReduce, 5, scaling,
			train.RunConfig{Name: "e2e-bad", Progress: train.ProgressOff, Rendezvous: "127.0.0.1:0"})
		is.NoErr(err)
		start := time.Now()
		_, err = tr.Fit(ctx)
		took := time.Since(start)
		is.True(err != nil)
		t.Logf("after %v: %v", took.Round(100*time.Millisecond), err)
		is.True(strings.Contains(err.Error(), "cannot reach the run's rendezvous at 127.0.0.1:")) // names the address
		is.True(strings.Contains(err.Error(), "RunConfig.Rendezvous"))                            // and the setting
		is.True(took < 30*time.Second)                                                            // in seconds, not a hang
		released(t)
	})

	is.New(t).NoErr(c.Close())
	is.New(t).NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
	if ns := cp.NetworkNamespaces(); len(ns) > 0 {
		t.Errorf("network namespaces left after the pods: %v", ns)
	}
}

// pythonAndHostScript returns the python3 interpreter itself (not a pyenv
// shim, which needs the test's HOME) and train/testdata/host.py, by
// absolute path: pods run on this machine's file system.
func pythonAndHostScript(t *testing.T) (string, string) {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 is needed for this test: %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "train", "testdata", "host.py"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)), script
}

type k8sCountCfg struct {
	Iters int
	Pause time.Duration
}

// k8sCounting adds (rank+1) through an AllReduce each iteration (pausing
// Pause), checkpointing the running sum from rank 0: after Iters
// iterations the sum is Iters × (1+…+world), however often the run
// restarted from a checkpoint. It reports its slice.
var k8sCounting = train.NewLoop("k8stest.counting", func(ctx context.Context, w *train.Worker, cfg k8sCountCfg) error {
	sum := 0.0
	if data, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if data != nil {
		if err := json.Unmarshal(data, &sum); err != nil {
			return err
		}
	}
	for it := w.Iteration(); it < cfg.Iters; it++ {
		xs := []float64{float64(w.Rank() + 1)}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		sum += xs[0]
		var ck []byte
		if w.Rank() == 0 {
			ck, _ = json.Marshal(sum)
		}
		if err := w.Report(ctx, train.Metrics{"sum": sum, "attempt": float64(w.Attempt())}, ck); err != nil {
			return err
		}
		select {
		case <-time.After(cfg.Pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
})

// TestE2ETrainResumesAfterNodeNotReady: a host's node of the slice a run
// trains on goes NotReady at iteration 5 (as a kubelet that stops
// reporting does): the attempt fails with Unavailable, the run resumes from
// its checkpoint on the other slice and reaches the same answer as a run
// without the failure.
func TestE2ETrainResumesAfterNodeNotReady(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, nil)
	setReady := func(name string, ready bool) error {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
				n.Status.Conditions[i].Reason = "KubeletNotReady"
			}
		}
		_, err = cp.Client().CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}
	var lostSlice, lostNode string
	var injectErr error
	inject := func(r train.Report) {
		if r.Attempt != 0 || r.Iteration != 5 || lostNode != "" {
			return
		}
		lostSlice = r.Slices[0]
		states, err := ray.TPUSlices(ctx, c)
		if err != nil {
			injectErr = err
			return
		}
		for _, s := range states {
			if s.Name == lostSlice {
				lostNode = s.Hosts[1].Node
			}
		}
		injectErr = setReady(lostNode, false)
	}
	const iters = 15
	tr, err := train.New(c, k8sCounting, k8sCountCfg{Iters: iters, Pause: 200 * time.Millisecond},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4},
		train.RunConfig{Name: "resume", Progress: train.ProgressOff, MaxFailures: 1, OnReport: inject})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.NoErr(injectErr)
	is.Equal(res.Metrics["sum"], float64(iters*3)) // 1+2 per iteration, as without the failure
	is.Equal(res.Attempts, 2)
	is.Equal(len(res.Failures), 1)
	f := res.Failures[0]
	is.Equal(f.Slice, lostSlice)
	is.Equal(ray.CodeOf(f.Err), ray.Unavailable) // the host was lost
	is.True(f.ResumeFrom >= 4)
	t.Logf("node %s of %s went NotReady at iteration 5: %v; resumed from checkpoint %d on the other slice", lostNode, lostSlice, f.Err, f.ResumeFrom)
	is.NoErr(setReady(lostNode, true))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
