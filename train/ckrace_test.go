package train_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

type racingCfg struct{ Iters int }

// racing saves data from every rank at every report, with no collective
// between reports: ranks run ahead of each other, so that one rank writes
// iteration N+k's data while iteration N is committed and older ones are
// pruned.
var racing = train.NewLoop("train_test.racing", func(ctx context.Context, w *train.Worker, cfg racingCfg) error {
	for it := w.Iteration() + 1; it <= cfg.Iters; it++ {
		data := fmt.Appendf(nil, "rank %d iteration %d", w.Rank(), it)
		if err := w.Report(ctx, train.Metrics{"it": float64(it)}, data); err != nil {
			return err
		}
	}
	return nil
})

// TestCheckpointWritesRacePruning: 16 ranks each save data at every report
// while commits prune all but the newest checkpoint (and remove the debris
// of interrupted writes): no write ever fails, on file:// and mem://. It
// failed on file:// before pruning's removal of empty directories stopped
// racing a rank's write into a directory it had just created.
func TestCheckpointWritesRacePruning(t *testing.T) {
	for _, scheme := range []string{"file", "mem"} {
		t.Run(scheme, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "8x8", 1, false)
			url, iters := "mem://", 150
			if scheme == "file" {
				url, iters = "file://"+t.TempDir(), 60 // every write is synced
			}
			tr, err := train.New(c, racing, racingCfg{Iters: iters},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "8x8"},
				train.RunConfig{Name: "racing", Storage: url, KeepCheckpoints: 1, Progress: train.ProgressOff})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.NoErr(err) // no write failed
			is.Equal(res.Attempts, 1)
			is.Equal(res.Iteration, iters)
			is.Equal(iterations(res.Checkpoints), []int{iters})
			is.Equal(len(res.Checkpoint.Ranks), 16)
			if scheme == "file" {
				for _, rank := range []int{0, 15} {
					data, err := res.Checkpoint.Load(context.Background(), rank)
					is.NoErr(err)
					is.Equal(string(data), fmt.Sprintf("rank %d iteration %d", rank, iters))
				}
			}
		})
	}
}
