package train_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

// TestFinishedRunStartedAgain: a run that finished, started again with the
// same loop and configuration, returns its final result without
// training and says so in Result and in the log; with another
// configuration it trains on from its latest checkpoint; and a run whose
// loop has nothing left to do returns the iteration and metrics of its
// latest checkpoint (it returned iteration 0 and no metrics before).
func TestFinishedRunStartedAgain(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	_, c := newCluster(t, "4x4", 1, false)
	dir := t.TempDir()
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	var log bytes.Buffer
	reports := 0
	run := train.RunConfig{Name: "done", Storage: "file://" + dir, Progress: train.ProgressLog,
		ProgressLogger: slog.New(slog.NewTextHandler(&log, nil)), OnReport: func(train.Report) { reports++ }}
	fit := func(iters int) *train.Result {
		t.Helper()
		tr, err := train.New(c, counting, countCfg{Iters: iters, Len: 4}, scaling, run)
		is.NoErr(err)
		res, err := tr.Fit(ctx)
		is.NoErr(err)
		return res
	}

	res := fit(4)
	is.True(!res.AlreadyFinished)
	is.Equal(res.Iteration, 4)
	is.Equal(reports, 4)
	_, err := os.Stat(filepath.Join(dir, "done", "FINISHED"))
	is.NoErr(err)

	log.Reset()
	res = fit(4) // started again
	is.True(res.AlreadyFinished)
	is.Equal(res.Attempts, 0)
	is.Equal(reports, 4) // no worker ran
	is.Equal(res.Iteration, 4)
	is.Equal(res.Metrics["value"], 40.0)
	is.Equal(res.Checkpoint.Iteration, 4)
	is.True(strings.Contains(log.String(), "the run had finished; nothing to train"))
	is.True(strings.Contains(log.String(), "iteration=4"))

	res = fit(6) // more iterations: trains on from checkpoint 4
	is.True(!res.AlreadyFinished)
	is.Equal(res.Iteration, 6)
	is.Equal(res.Metrics["resumed_from"], 4.0)
	is.Equal(res.Metrics["value"], 60.0)
	is.Equal(reports, 6)

	// Without the marker (a run finished before markers existed), the
	// loop runs, reports nothing, and the result is the checkpoint's.
	is.NoErr(os.Remove(filepath.Join(dir, "done", "FINISHED")))
	res = fit(6)
	is.True(!res.AlreadyFinished)
	is.Equal(res.Attempts, 1)
	is.Equal(reports, 6)
	is.Equal(res.Iteration, 6)
	is.Equal(res.Metrics["value"], 60.0)
}
