//go:build e2e

package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// TestE2EProgramReports runs Python training programs (train.NewProgram,
// one python3 process per host, each in a worker pod with a network
// namespace of its own) on 2 × v6e 4x4 on a real control plane. The
// programs speak the report protocol through goray_train, the module the
// worker puts on their PYTHONPATH: they ask the driver's endpoint (at
// Config.DriverHost, outside the pods' network) for their world and the
// checkpoint to resume from, report metrics every step and commit
// checkpoint directories into the run's file:// storage, a directory the
// pods share with the driver. Rank 0's pod is deleted mid-run (an
// eviction): the run resumes from the last checkpoint every rank had
// committed, and what the programs reported after it shows they resumed
// there.
//
//   - goray_train: train/testdata/report_program.py, every rank committing a
//     directory every 2 steps, 2 checkpoints kept.
//
//   - examples/jax-train: the example's train.py (its pure-Python step: no
//     JAX here), with the example's own settings: 80 steps, a checkpoint
//     every 10, rank 0's host lost at step 35; it converges to the known
//     answer.
//
// No program process outlives its run.
func TestE2EProgramReports(t *testing.T) {
	ctx := t.Context()
	cp, c := slicesCluster(t, "4x4", []string{"slice-a", "slice-b"}, nil)
	python, _ := pythonAndHostScript(t)
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}

	t.Run("goray_train", func(t *testing.T) {
		is := is.New(t)
		dir := t.TempDir()
		const steps, every = 12, 2
		var reports []train.Report
		var killed string
		var killErr error
		mark := leakMark(t)
		running := 0
		inject := func(r train.Report) {
			reports = append(reports, r)
			if r.Attempt != 0 || r.Iteration != 5 || killed != "" {
				return
			}
			// Rank 0 waits here for this reply; the other ranks go on
			// (nothing couples them) and complete checkpoint 4 (a
			// condition polled, up to a minute), but not 6, which needs
			// rank 0's report.
			killErr = waitForFile(ctx, filepath.Join(dir, "py", "checkpoint_000000004", "COMPLETE"), time.Minute)
			if killErr == nil {
				// Rank 0's program waits for this reply (the others may
				// have run to their end): the leak check must see it.
				running = len(processesWithEnv(leakMarkEnv + "=" + mark))
				killed, killErr = deleteHostPod(ctx, cp, c, r.Slices[0], 0)
			}
		}
		var out bytes.Buffer
		tr, err := train.NewProgram(c, train.Program{Path: python, Args: []string{repoFile(t, "train", "testdata", "report_program.py"), fmt.Sprint(steps), fmt.Sprint(every)},
			Env: map[string]string{leakMarkEnv: mark}},
			scaling, train.RunConfig{Name: "py", Storage: "file://" + dir, MaxFailures: 1, KeepCheckpoints: 2,
				Progress: train.ProgressOff, OnReport: inject, Output: &out})
		is.NoErr(err)
		res, err := tr.Fit(ctx)
		if err != nil {
			t.Fatalf("Fit: %v; programs' output:\n%s", err, out.String())
		}
		is.NoErr(killErr)
		is.True(running >= 1) // rank 0's program, at least, was found by its mark
		t.Logf("deleted pod %s at rank 0's report of step 5; failure: %v", killed, res.Failures[0].Err)
		is.Equal(res.Attempts, 2)
		is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable) // the host was lost
		is.Equal(res.Failures[0].ResumeFrom, 4)                    // the latest checkpoint every rank had committed
		// What the programs reported: rank 0 adds 1 a step, across the
		// restart; the second attempt started at the checkpoint's step.
		is.Equal(res.Iteration, steps)
		is.Equal(res.Metrics["state"], float64(steps))
		is.Equal(res.Metrics["resumed_from"], 4.0)
		is.Equal(res.Metrics["attempt"], 1.0)
		is.True(strings.Contains(out.String(), "rank 0 starts at step 4 of attempt 1"))
		is.True(strings.Contains(out.String(), "rank 3 starts at step 4 of attempt 1"))
		last := reports[len(reports)-1]
		is.Equal(last.Iteration, steps) // the reports reached OnReport
		is.True(last.Checkpoint)
		// Retention: the last 2 checkpoints, each with every rank's
		// directory as that rank's program wrote it, nothing staged left.
		is.Equal(checkpointIterations(res.Checkpoints), []int{steps - every, steps})
		is.Equal(res.Checkpoint.Dirs, []int{0, 1, 2, 3})
		for rank := range 4 {
			d, err := res.Checkpoint.Dir(rank)
			is.NoErr(err)
			b, err := os.ReadFile(filepath.Join(d, "state.json"))
			is.NoErr(err)
			var saved struct {
				Rank  int
				State float64
			}
			is.NoErr(json.Unmarshal(b, &saved))
			is.Equal(saved.Rank, rank)
			is.Equal(saved.State, float64(steps*(rank+1)))
		}
		is.Equal(dirNames(t, filepath.Join(dir, "py")), []string{"FINISHED", "checkpoint_000000010", "checkpoint_000000012"})
		assertProgramsGone(t, mark)
		assertSlicesReleased(t, c)
	})

	t.Run("examples/jax-train", func(t *testing.T) {
		is := is.New(t)
		dir := t.TempDir()
		const steps, every, killAt = 80, 10, 35 // the example's defaults
		var killed string
		var killErr error
		inject := func(r train.Report) {
			// Rank 0's report waits for this; the other ranks wait for it
			// at the next gradient exchange.
			if r.Attempt == 0 && r.Iteration == killAt && killed == "" {
				killed, killErr = deleteHostPod(ctx, cp, c, r.Slices[0], 0)
			}
		}
		mark := leakMark(t)
		var out bytes.Buffer
		tr, err := train.NewProgram(c, train.Program{Path: python, Args: []string{repoFile(t, "examples", "jax-train", "train.py"), fmt.Sprint(steps), fmt.Sprint(every)},
			Env: map[string]string{leakMarkEnv: mark}},
			scaling, train.RunConfig{Name: "jax-regression", Storage: "file://" + dir, MaxFailures: 2, KeepCheckpoints: 2,
				Progress: train.ProgressOff, TotalIterations: steps, OnReport: inject, Output: &out})
		is.NoErr(err)
		res, err := tr.Fit(ctx)
		if err != nil {
			t.Fatalf("Fit: %v; programs' output:\n%s", err, out.String())
		}
		is.NoErr(killErr)
		t.Logf("deleted pod %s at rank 0's report of step %d; failure: %v", killed, killAt, res.Failures[0].Err)
		lines := out.String()
		is.Equal(res.Attempts, 2)
		is.Equal(len(res.Failures), 1)
		is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
		is.Equal(res.Failures[0].ResumeFrom, 30) // every rank had reported step 30 before rank 0 reported 35
		is.Equal(res.Iteration, steps)
		is.True(res.Metrics["loss"] < 1e-12) // the loss the program reported at its last step
		for rank := range 4 {
			is.True(strings.Contains(lines, fmt.Sprintf("rank %d of 4 (pure python) starts at step 30, attempt 1", rank))) // every host resumed
		}
		is.Equal(checkpointIterations(res.Checkpoints), []int{steps - every, steps})
		is.Equal(res.Checkpoint.Dirs, []int{0}) // only rank 0 commits a directory
		d, err := res.Checkpoint.Dir(0)
		is.NoErr(err)
		b, err := os.ReadFile(filepath.Join(d, "params.json"))
		is.NoErr(err)
		var params []float64
		is.NoErr(json.Unmarshal(b, &params))
		want := []float64{2, -3, 0.5, 1.25, 0.75} // examples/jax-train: TrueW, TrueB
		is.Equal(len(params), len(want))
		for i := range want {
			if math.Abs(params[i]-want[i]) > 1e-6 {
				t.Errorf("parameter %d = %v, want %v within 1e-6", i, params[i], want[i])
			}
		}
		assertProgramsGone(t, mark)
		assertSlicesReleased(t, c)
	})

	is := is.New(t)
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// deleteHostPod deletes, at once (grace period 0, as an eviction of a lost
// node would), the worker pod on host worker of a slice, waits for its
// process to be gone, and returns its name.
func deleteHostPod(ctx context.Context, cp *kubeharness.ControlPlane, c *ray.Cluster, slice string, worker int) (string, error) {
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return "", err
	}
	node := ""
	for _, s := range states {
		if s.Name == slice {
			node = s.Hosts[worker].Node
		}
	}
	if node == "" {
		return "", fmt.Errorf("no slice %s among %+v", slice, states)
	}
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", err
	}
	if len(pods.Items) != 1 {
		return "", fmt.Errorf("%d worker pods on node %s, want 1", len(pods.Items), node)
	}
	name := pods.Items[0].Name
	pp, err := cp.PodProcess("default", name, "")
	if err != nil {
		return name, err
	}
	if err := cp.Client().CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return name, err
	}
	// Return once the pod's process is gone (and with it its program), so
	// that the caller's reply to the program's report reaches nobody: the
	// program cannot go on to the next checkpoint.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = pp.Wait(wctx)
	return name, err
}

// waitForFile polls for path, up to limit.
func waitForFile(ctx context.Context, path string, limit time.Duration) error {
	for deadline := time.Now().Add(limit); ; {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// repoFile is a file of this repository by absolute path: pods run on this
// machine's file system.
func repoFile(t *testing.T, elem ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"..", ".."}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkpointIterations(cks []*train.Checkpoint) []int {
	var its []int
	for _, ck := range cks {
		its = append(its, ck.Iteration)
	}
	return its
}

// dirNames lists a directory's entries, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// assertSlicesReleased checks that no slice is reserved any more.
func assertSlicesReleased(t *testing.T, c *ray.Cluster) {
	t.Helper()
	states, err := ray.TPUSlices(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.ReservedBy != 0 {
			t.Errorf("slice %s is still reserved by %v (%s)", st.Name, st.ReservedBy, st.ReservedName)
		}
	}
}

// leakMarkEnv is set, to a value of the test's own, in the environment of
// every program a test starts, so that a process left behind can be found.
const leakMarkEnv = "K8STEST_PROGRAM_MARK"

func leakMark(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), time.Now().UnixNano())
}

// assertProgramsGone fails if a process with mark in its environment is
// still running (up to 10 s after the run, for a process already killed
// to be reaped).
func assertProgramsGone(t *testing.T, mark string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = processesWithEnv(leakMarkEnv + "=" + mark)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("program processes outlived the run: %v", left)
	}
}

// processesWithEnv lists "pid: command line" of the live processes whose
// environment holds kv.
func processesWithEnv(kv string) []string {
	ents, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), kv) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil && strings.Contains(string(st), ") Z ") {
			continue // a zombie: exited
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		found = append(found, pid+": "+strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " "))
	}
	return found
}
