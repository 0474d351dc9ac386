package data_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/data"
)

// benchRows is the rows each benchmark iteration pushes through.
const benchRows = 200_000

// The three operators of the pipeline benchmark, on small rows (ints).
func triple(_ context.Context, x int) (int, error)  { return 3 * x, nil }
func plusOne(_ context.Context, x int) (int, error) { return x + 1, nil }

// handPipeline is what a user would write by hand for the same work: one
// goroutine per stage, rows over buffered channels, in order.
func handPipeline(ctx context.Context, n int) int64 {
	src, a, b := make(chan int, 256), make(chan int, 256), make(chan int, 256)
	go func() {
		defer close(src)
		for i := range n {
			select {
			case src <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer close(a)
		for x := range src {
			v, _ := triple(ctx, x)
			a <- v
		}
	}()
	go func() {
		defer close(b)
		for x := range a {
			if keep, _ := even(ctx, x); keep {
				b <- x
			}
		}
	}()
	var count int64
	for x := range b {
		if _, err := plusOne(ctx, x); err == nil {
			count++
		}
	}
	return count
}

// handBatched is the same pipeline by hand with rows sent in slices of
// 256, the stronger baseline (what data does internally, minus ordering
// across workers, caps and positions).
func handBatched(ctx context.Context, n int) int64 {
	const size = 256
	src, a, b := make(chan []int, 4), make(chan []int, 4), make(chan []int, 4)
	go func() {
		defer close(src)
		for lo := 0; lo < n; lo += size {
			blk := make([]int, 0, size)
			for i := lo; i < min(lo+size, n); i++ {
				blk = append(blk, i)
			}
			select {
			case src <- blk:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer close(a)
		for blk := range src {
			out := make([]int, len(blk))
			for i, x := range blk {
				out[i], _ = triple(ctx, x)
			}
			a <- out
		}
	}()
	go func() {
		defer close(b)
		for blk := range a {
			out := make([]int, 0, len(blk))
			for _, x := range blk {
				if keep, _ := even(ctx, x); keep {
					out = append(out, x)
				}
			}
			b <- out
		}
	}()
	var count int64
	for blk := range b {
		for _, x := range blk {
			if _, err := plusOne(ctx, x); err == nil {
				count++
			}
		}
	}
	return count
}

// BenchmarkPipeline runs Range → Map → Filter → Map → Count through data
// and through handPipeline and handBatched in the same run, reporting
// rows per second.
//
//	go test -run '^$' -bench 'Pipeline' -benchtime 10x -count 3 ./data/
func BenchmarkPipeline(b *testing.B) {
	ctx := context.Background()
	ds := data.Map(data.Filter(data.Map(data.Range(benchRows), triple), even), plusOne)
	b.Run("data", func(b *testing.B) {
		for b.Loop() {
			n, err := data.Count(ctx, ds, data.Progress(false))
			if err != nil || n != benchRows/2 {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("channels", func(b *testing.B) {
		for b.Loop() {
			if n := handPipeline(ctx, benchRows); n != benchRows/2 {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("channels-batched", func(b *testing.B) {
		for b.Loop() {
			if n := handBatched(ctx, benchRows); n != benchRows/2 {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// heapSampler records the peak of live heap objects while it runs.
type heapSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

func sampleHeap() *heapSampler {
	s := &heapSampler{stop: make(chan struct{})}
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	s.wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			s.peak = max(s.peak, sample[0].Value.Uint64())
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *heapSampler) done() uint64 {
	close(s.stop)
	s.wg.Wait()
	return s.peak
}

// BenchmarkMemory pushes 1 KiB rows through Range → Map (make the row) →
// Map (read it) into a sink that takes its time, under row caps of
// different sizes, and reports the peak live heap against the bytes the
// caps allow (two operators hold 1 KiB rows, each up to its cap). The
// peak grows with the cap, not with the rows read.
//
//	go test -run '^$' -bench 'Memory' -benchtime 3x -count 3 ./data/
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	const rows = 100_000
	payload := func(_ context.Context, i int) (string, error) { return strings.Repeat("x", 1024), nil }
	length := func(_ context.Context, s string) (string, error) { return s, nil }
	for _, capRows := range []int{512, 4096, 32768} {
		b.Run(fmt.Sprintf("cap=%d", capRows), func(b *testing.B) {
			var peak, inflight uint64
			for b.Loop() {
				ds := data.Map(data.Map(data.Range(rows), payload), length)
				s := sampleHeap()
				var st data.Stats
				var sum int
				for row, err := range data.Rows(ctx, ds, data.MaxRowsInFlight(capRows), data.CollectStats(&st), data.Progress(false)) {
					if err != nil {
						b.Fatal(err)
					}
					sum += len(row) // a sink that touches every row
				}
				peak = max(peak, s.done())
				var held int64
				for _, o := range st.Operators[1:] {
					held += o.PeakRowsInFlight
				}
				inflight = max(inflight, uint64(held))
			}
			allowed := float64(2*capRows) * 1024
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(allowed/(1<<20), "cap-MiB")
			b.ReportMetric(float64(inflight), "peak-rows-in-flight")
		})
	}
}
