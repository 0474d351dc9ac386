package train_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
}

// TestPythonProgramReports runs testdata/report_program.py with python3 on
// 4 hosts: it reports every step through goray_train against the real
// driver and commits a checkpoint directory per rank every 2 steps. Rank
// 0's host is killed at iteration 5; the run resumes on a fresh slice
// from the latest complete checkpoint, which every rank reads back, and
// the final state, Result.Metrics, retention and the checkpoint
// directories are right.
func TestPythonProgramReports(t *testing.T) {
	needPython(t)
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in process", true: "worker processes"}[procs], func(t *testing.T) { testPythonProgramReports(t, procs) })
	}
}

func testPythonProgramReports(t *testing.T, procs bool) {
	is := is.New(t)
	ctx := context.Background()
	b, c := newCluster(t, "4x4", 2, procs)
	dir := t.TempDir()
	const steps, every = 12, 2
	var reports []train.Report
	var injectErr error
	mark := testMark(t) // in the programs' environment
	running := -1       // rank 0's programs found before the kill
	inject := func(r train.Report) {
		reports = append(reports, r)
		if r.Attempt == 0 && r.Iteration == 5 {
			// Rank 0 waits here for this reply; the other ranks go on
			// (nothing couples them) and complete checkpoint 4 (a
			// condition polled, up to a minute: no sleep decides the
			// outcome), but not 6, which needs rank 0's report.
			marker := filepath.Join(dir, "py", "checkpoint_000000004", "COMPLETE")
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(marker); err == nil {
					break
				}
			}
			rank0 := []string{"GORAY_TEST_MARK=" + mark, "GORAY_TRAIN_ATTEMPT=0", "GORAY_TRAIN_RANK=0"}
			running = len(programsWithEnv(rank0...))
			injectErr = b.KillNode(ctx, hostOf(t, c, r.Slices[0], 0)) // rank 0's own host
			// The kill reaches rank 0's program a moment later (its
			// task's context stops it, or the parent-death signal): the
			// reply to this report must not find it still running, or it
			// would report step 6 and complete checkpoint 6 before the
			// driver learns of the failure.
			if injectErr == nil {
				injectErr = waitProgramsGone(rank0...)
			}
		}
	}
	tr, err := train.NewProgram(c, train.Program{Path: "python3", Args: []string{abs(t, "testdata/report_program.py"), "12", "2"}, Env: map[string]string{"GORAY_TEST_MARK": mark}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "py", Storage: "file://" + dir, MaxFailures: 1, KeepCheckpoints: 2, Progress: train.ProgressOff, OnReport: inject, Output: testWriter{t}})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.NoErr(injectErr)
	if _, err := os.Stat("/proc/self/environ"); err == nil {
		is.Equal(running, 1) // the wait for rank 0's program to be gone found it
	}
	is.Equal(res.Attempts, 2)
	is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
	resumed := res.Failures[0].ResumeFrom
	is.Equal(resumed, 4) // the latest complete checkpoint
	is.Equal(res.Iteration, steps)
	is.Equal(res.Metrics["state"], float64(steps)) // rank 0 adds 1 per step, across the restart
	is.Equal(res.Metrics["resumed_from"], float64(resumed))
	is.Equal(res.Metrics["attempt"], 1.0)
	is.Equal(reports[len(reports)-1].Iteration, steps) // reports reach OnReport (the dashboard, the progress line)
	is.True(reports[len(reports)-1].Checkpoint)
	is.Equal(iterations(res.Checkpoints), []int{steps - every, steps}) // KeepCheckpoints
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
	is.Equal(dirs(t, filepath.Join(dir, "py")), []string{"checkpoint_000000010", "checkpoint_000000012"}) // nothing staged is left
	assertReleased(t, c)
}

// testWriter logs a program's output lines.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

// TestStagingRemovedAfterFailedRun: a program that stages a checkpoint
// directory and fails before reporting it leaves nothing in the run's
// storage once Fit has returned.
func TestStagingRemovedAfterFailedRun(t *testing.T) {
	needPython(t)
	is := is.New(t)
	_, c := newCluster(t, "4x4", 1, false)
	dir := t.TempDir()
	script := `import goray_train, os; d = goray_train.staging_dir(); open(os.path.join(d, "x"), "w").write("1"); raise SystemExit(3)`
	tr, err := train.NewProgram(c, train.Program{Path: "python3", Args: []string{"-c", script}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "staged", Storage: "file://" + dir, Progress: train.ProgressOff, Output: testWriter{t}})
	is.NoErr(err)
	_, err = tr.Fit(context.Background())
	is.True(err != nil) // exit status 3
	is.Equal(ray.CodeOf(err), ray.TaskFailed)
	_, err = os.Stat(filepath.Join(dir, "staged", "staging"))
	is.True(os.IsNotExist(err))
}
