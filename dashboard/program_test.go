package dashboard_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/train"
)

// reporting is a program that reports three iterations through
// goray_train, rank 0 committing a checkpoint directory at the second.
const reporting = `
import os, goray_train
for i in range(3):
    d = None
    if i == 1 and goray_train.world()["rank"] == 0:
        d = goray_train.staging_dir()
        open(os.path.join(d, "state"), "w").write("x")
    goray_train.report({"loss": 3 - i}, checkpoint_dir=d)
`

// TestTrainRunFromProgram: a Python program's reports (train.NewProgram,
// goray_train) reach the dashboard's train charts as a Go loop's do.
func TestTrainRunFromProgram(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	run := dashboard.NewTrainRun("program")
	d.TrackRun(run)
	tr, err := train.NewProgram(c, train.Program{Path: "python3", Args: []string{"-c", reporting}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "program", Storage: "file://" + t.TempDir(), Progress: train.ProgressOff, OnReport: run.OnReport})
	is.NoErr(err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	run.Finish(res, err)
	is.NoErr(err)
	st := d.View(t.Context()).Train[0]
	is.Equal(st.Iteration, 3)
	is.Equal(len(st.Points), 3)
	is.Equal(st.Metrics, train.Metrics{"loss": 1})
	is.Equal(st.Checkpoints, []int{2})
	is.True(st.Done)
	is.Equal(st.Error, "")
}
