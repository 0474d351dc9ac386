package train_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/train"
)

// benchRow is a row of the ingestion benchmark: about 70 bytes as JSON.
type benchRow struct {
	ID    int
	Text  string
	Label float64
}

const benchRows = 1 << 20

func benchDataset() *data.Dataset[benchRow] {
	text := strings.Repeat("x", 32)
	return data.Map(data.Range(benchRows), func(_ context.Context, i int) (benchRow, error) {
		return benchRow{ID: i, Text: text, Label: float64(i % 7)}, nil
	})
}

// ingestLoop reads Epochs epochs of its shard between two barriers; rank
// 0 reports the seconds.
var ingestLoop = train.NewLoop("train_test.ingest", func(ctx context.Context, w *train.Worker, epochs int) error {
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	n := 0
	for range epochs {
		for _, err := range train.DatasetShard[benchRow](ctx, w, "train") {
			if err != nil {
				return err
			}
			n++
		}
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	return w.Report(ctx, train.Metrics{"seconds": time.Since(start).Seconds(), "rows": float64(n)}, nil)
})

// BenchmarkDatasetShard: 4 workers of a v6e 4x4 each read their shard of
// 1M rows (an epoch per op) through train.DatasetShard, in process and in
// 4 worker processes, against the same dataset split by data.Split to 4
// goroutines of the driver (no train, no sockets, no JSON) in the same
// run. rows/s counts the rows of all workers.
func BenchmarkDatasetShard(b *testing.B) {
	for _, procs := range []bool{false, true} {
		mode := map[bool]string{false: "in-process", true: "processes"}[procs]
		b.Run(mode, func(b *testing.B) {
			_, c := newBenchCluster(b, "4x4", procs)
			tr, err := train.New(c, ingestLoop, b.N,
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": train.Data(benchDataset())}})
			if err != nil {
				b.Fatal(err)
			}
			res, err := tr.Fit(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			perOp := res.Metrics["seconds"] / float64(b.N)
			b.ReportMetric(perOp*1e9, "ns/op")
			b.ReportMetric(benchRows/perOp, "rows/s")
			b.ReportMetric(perOp/splitBaseline(b), "x-split")
		})
	}
}

// BenchmarkDatasetSplit is the baseline alone: data.Split of the same
// dataset to 4 goroutines in one process.
func BenchmarkDatasetSplit(b *testing.B) {
	for b.Loop() {
		splitOnce(b)
	}
	b.ReportMetric(benchRows/(b.Elapsed().Seconds()/float64(b.N)), "rows/s")
}

// splitBaseline returns the best of 3 timings of splitOnce, in seconds.
func splitBaseline(b *testing.B) float64 {
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		splitOnce(b)
		best = min(best, time.Since(start))
	}
	return best.Seconds()
}

func splitOnce(b *testing.B) {
	s, err := data.Split(context.Background(), benchDataset(), 4, data.Equal(), data.Progress(false))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for _, err := range s.Shard(i) {
				if err != nil {
					panic(fmt.Sprint(err))
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}
