package train_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/train"
)

// envCheck checks, on every attempt, that the worker's TPU env is that of
// the host it runs on (so it comes from the live reservation), then keeps
// reporting until Iters.
var envCheck = train.NewLoop("train_test.env", func(ctx context.Context, w *train.Worker, iters int) error {
	rc, _ := ray.Runtime(ctx)
	labels := rc.NodeLabels()
	hostsPerSlice := w.WorldSize() / w.NumSlices()
	for key, want := range map[string]string{
		"TPU_NAME":      labels[tpu.LabelSliceName],
		"TPU_WORKER_ID": labels[tpu.LabelWorkerID],
	} {
		if got := w.Getenv(key); got != want {
			return fmt.Errorf("rank %d on %s: %s=%q, but the host's is %q", w.Rank(), rc.NodeName(), key, got, want)
		}
	}
	if got := w.Getenv("TPU_WORKER_ID"); got != strconv.Itoa(w.Rank()%hostsPerSlice) {
		return fmt.Errorf("rank %d: TPU_WORKER_ID=%s", w.Rank(), got)
	}
	if w.NumSlices() > 1 {
		if got := w.Getenv("MEGASCALE_SLICE_ID"); got != strconv.Itoa(w.SliceIndex()) {
			return fmt.Errorf("rank %d: MEGASCALE_SLICE_ID=%s, want %d", w.Rank(), got, w.SliceIndex())
		}
		if got := w.Getenv("MEGASCALE_NUM_SLICES"); got != strconv.Itoa(w.NumSlices()) {
			return fmt.Errorf("rank %d: MEGASCALE_NUM_SLICES=%s, want %d", w.Rank(), got, w.NumSlices())
		}
	}
	for it := w.Iteration(); it < iters; it++ {
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		if err := w.Report(ctx, train.Metrics{"attempt": float64(w.Attempt())}, []byte("{}")); err != nil {
			return err
		}
	}
	return nil
})

// TestEnvFromLiveReservation: two slices, one of them preempted; on the
// restart every worker's env (TPU_NAME, TPU_WORKER_ID, MEGASCALE_*) is the
// new hosts', not the old ones'.
func TestEnvFromLiveReservation(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in process", true: "worker processes"}[procs], func(t *testing.T) {
			is := is.New(t)
			ctx := context.Background()
			b, c := newCluster(t, "4x4", 3, procs)
			var first, second []string
			tr, err := train.New(c, envCheck, 6,
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2, NumWorkers: 8},
				train.RunConfig{Progress: train.ProgressOff, MaxFailures: 1, OnReport: func(r train.Report) {
					switch {
					case r.Attempt == 0 && r.Iteration == 3:
						first = r.Slices
						b.PreemptSlice(ctx, r.Slices[1]) //nolint:errcheck // the failure below checks it
					case r.Attempt == 1:
						second = r.Slices
					}
				}})
			is.NoErr(err)
			res, err := tr.Fit(ctx)
			is.NoErr(err) // every check passed on both attempts
			is.Equal(res.Attempts, 2)
			is.Equal(res.Failures[0].Slice, first[1])
			is.True(second[0] != first[1] && second[1] != first[1]) // the preempted slice was not reused
			assertReleased(t, c)
		})
	}
}
