package train_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

type benchCfg struct{ Len, Iters int }

// benchLoop times Iters AllReduces of Len float32 between two barriers;
// rank 0 reports the seconds.
var benchLoop = train.NewLoop("train_test.bench", func(ctx context.Context, w *train.Worker, cfg benchCfg) error {
	xs := make([]float32, cfg.Len)
	for i := range xs {
		xs[i] = float32(w.Rank())
	}
	if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil { // warm up
		return err
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	for range cfg.Iters {
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	return w.Report(ctx, train.Metrics{"seconds": time.Since(start).Seconds()}, nil)
})

// topologyFor is a v6e slice with n hosts.
var topologyFor = map[int]string{4: "4x4", 16: "8x8", 64: "16x16"}

// BenchmarkAllReduce: 1M float32 (4 MB) summed over 4, 16 and 64 workers
// of one slice on the local backend, in process and with worker processes
// (4 processes), against a single-process sum of the same data (n vectors
// of 1M float32 into one) measured in the same run. Metrics: algbw-GB/s is
// the vector's size over the time of one AllReduce, busbw-GB/s that times
// 2(n-1)/n (what each worker sends), x-sum the ratio of the AllReduce's
// time to the single-process sum's.
func BenchmarkAllReduce(b *testing.B) {
	const n = 1 << 20
	for _, procs := range []bool{false, true} {
		for _, workers := range []int{4, 16, 64} {
			mode := map[bool]string{false: "in-process", true: "processes"}[procs]
			b.Run(fmt.Sprintf("%s/workers=%d", mode, workers), func(b *testing.B) {
				_, c := newBenchCluster(b, topologyFor[workers], procs)
				tr, err := train.New(c, benchLoop, benchCfg{Len: n, Iters: b.N},
					train.ScalingConfig{AcceleratorVersion: "v6e", Topology: topologyFor[workers]},
					train.RunConfig{Progress: train.ProgressOff})
				if err != nil {
					b.Fatal(err)
				}
				res, err := tr.Fit(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				perOp := res.Metrics["seconds"] / float64(b.N)
				sum := singleProcessSum(workers, n)
				b.ReportMetric(perOp*1e9, "ns/op")
				b.ReportMetric(4*n/perOp/1e9, "algbw-GB/s")
				b.ReportMetric(4*n/perOp/1e9*2*float64(workers-1)/float64(workers), "busbw-GB/s")
				b.ReportMetric(perOp/sum, "x-sum")
			})
		}
	}
}

// BenchmarkSingleProcessSum is the baseline: the same data summed in one
// goroutine. GB/s counts the bytes read.
func BenchmarkSingleProcessSum(b *testing.B) {
	const n = 1 << 20
	for _, workers := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			data, out := sumData(workers, n)
			b.ResetTimer()
			for b.Loop() {
				sumInto(out, data)
			}
			perOp := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(workers*4*n)/perOp/1e9, "GB/s")
		})
	}
}

func sumData(workers, n int) ([][]float32, []float32) {
	data := make([][]float32, workers)
	for r := range data {
		data[r] = make([]float32, n)
		for i := range data[r] {
			data[r][i] = float32(r)
		}
	}
	return data, make([]float32, n)
}

func sumInto(out []float32, data [][]float32) {
	copy(out, data[0])
	for _, d := range data[1:] {
		for i, v := range d {
			out[i] += v
		}
	}
}

// singleProcessSum returns the best of 3 timings of the baseline sum, in
// seconds.
func singleProcessSum(workers, n int) float64 {
	data, out := sumData(workers, n)
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		sumInto(out, data)
		best = min(best, time.Since(start))
	}
	return best.Seconds()
}

func newBenchCluster(b *testing.B, topo string, procs bool) (any, *ray.Cluster) {
	b.Helper()
	opts := &local.Options{}
	if procs {
		opts.Processes = &local.ProcessOptions{Count: 4}
	}
	bk, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: topo, Count: 1}}}, opts)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), bk, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return bk, c
}
