package train_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

var panicky = train.NewLoop("train_test.panicky", func(ctx context.Context, w *train.Worker, cfg countCfg) error {
	if w.Rank() == 3 {
		var m map[string]int
		m["x"] = 1 // panics: assignment to entry in nil map
	}
	return nil
})

// A loop that panics on one rank: Fit's error is one line naming the run,
// the attempt, the rank, its host and the panic value (not the internal
// task); the stack is reachable with errors.As, also from a worker
// process.
func TestPanicIsOneLine(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-process", true: "worker processes"}[procs], func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 1, procs)
			tr, err := train.New(c, panicky, countCfg{}, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Name: "p", Progress: train.ProgressOff})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.True(err != nil)
			msg := err.Error()
			t.Log(msg)
			is.True(!strings.Contains(msg, "\n"))                 // one line
			is.True(!strings.Contains(msg, "goray.train.worker")) // not the internal task
			is.True(strings.Contains(msg, "train: run p: attempt 0 failed"))
			is.True(strings.Contains(msg, "rank 3 on v6e-16-0-w3: loop train_test.panicky panicked: assignment to entry in nil map"))
			var te *ray.TaskError
			is.True(errors.As(err, &te)) // the stack is reachable
			is.True(te.Panicked)
			is.True(strings.Contains(te.Stack, "panic_test.go")) // where the loop panicked
			is.Equal(len(res.Failures), 1)
			is.True(!strings.Contains(res.Failures[0].Cause, "\n"))
		})
	}
}
