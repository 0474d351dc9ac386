package data_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// TestInFlightCap runs a pipeline into a slow sink that, before taking
// each block's first row, waits until the producers have made all of the
// last operator's cap but the blocks admitted and not yet processed (at
// most one waiting in the intake and one per worker in the queue), or
// finished. The rows the last operator has made but the sink has not taken
// never exceed the cap, the operator's admitted rows reach the cap (so
// backpressure, not luck, held the producers back), and no operator's peak
// in flight is above its cap.
func TestInFlightCap(t *testing.T) {
	const (
		total = 20_000
		block = 10
	)
	tests := []struct {
		name      string
		cap, conc int
		opts      []data.Option
	}{
		{"ordered", 100, 2, nil},
		{"unordered", 100, 2, []data.Option{data.Unordered()}},
		{"one block", block, 2, nil},
		{"concurrency 1", 50, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var made atomic.Int64
			ds := data.Map(data.Range(total, data.BlockRows(block)), square, data.MaxRowsInFlight(tt.cap*3))
			ds = data.Map(ds, func(_ context.Context, x int) (int, error) {
				made.Add(1)
				return x, nil
			}, data.MaxRowsInFlight(tt.cap))
			var st data.Stats
			var taken, peak int64
			unprocessed := min(tt.cap, (tt.conc+1)*block)
			for _, err := range data.Rows(context.Background(), ds, append(tt.opts, data.Concurrency(tt.conc), data.CollectStats(&st))...) {
				is.NoErr(err)
				if taken%block == 0 { // the first row of a block: be slow
					for made.Load()-taken < int64(tt.cap-unprocessed) && made.Load() < total {
						runtime.Gosched()
					}
				}
				ahead := made.Load() - taken
				is.True(ahead <= int64(tt.cap)) // never more than the cap in flight
				peak = max(peak, ahead)
				taken++
			}
			is.Equal(taken, int64(total))
			is.True(peak >= int64(tt.cap-unprocessed))
			for _, o := range st.Operators {
				is.True(o.PeakRowsInFlight <= o.MaxRowsInFlight)
				is.Equal(o.RowsInFlight, int64(0)) // everything released
			}
			is.Equal(st.Operators[2].PeakRowsInFlight, int64(tt.cap))
		})
	}
}

// TestInFlightBytes caps the estimated bytes in flight of rows of 1 KiB.
func TestInFlightBytes(t *testing.T) {
	is := is.New(t)
	const capBytes = 64 << 10
	big := func(_ context.Context, i int) (string, error) { return strings.Repeat("x", 1024), nil }
	var st data.Stats
	n, err := data.Count(context.Background(), data.Map(data.Range(5000, data.BlockRows(8)), big, data.MaxBytesInFlight(capBytes)), data.CollectStats(&st))
	is.NoErr(err)
	is.Equal(n, int64(5000))
	m := st.Operators[1]
	is.Equal(m.MaxBytesInFlight, int64(capBytes))
	is.True(m.PeakBytesInFlight > 0)
	is.True(m.PeakBytesInFlight <= capBytes)
}

// TestStats checks the counters of a finished run.
func TestStats(t *testing.T) {
	is := is.New(t)
	var st data.Stats
	_, err := data.Count(context.Background(), data.Filter(data.Range(1000), even, data.Name("evens")), data.CollectStats(&st), data.Progress(false))
	is.NoErr(err)
	is.Equal(st.Rows, int64(500))
	is.Equal(len(st.Operators), 2)
	is.Equal(st.Operators[0].Name, "range")
	is.Equal(st.Operators[0].RowsOut, int64(1000))
	is.Equal(st.Operators[1].Name, "evens")
	is.Equal(st.Operators[1].RowsIn, int64(1000))
	is.Equal(st.Operators[1].RowsOut, int64(500))
	is.True(st.Operators[1].RowsPerSecond > 0)
	is.True(strings.Contains(st.String(), "evens"))
}

// TestProgress runs with the live progress line forced on (stderr is not a
// terminal under go test); its goroutine stops with the run (goleak).
func TestProgress(t *testing.T) {
	is := is.New(t)
	n, err := data.Count(context.Background(), data.Map(data.Range(100_000), square), data.Progress(true))
	is.NoErr(err)
	is.Equal(n, int64(100_000))
}

// TestCapSmallerThanBlocks admits blocks larger than an operator's cap in
// pieces, and cuts a source's blocks to its cap, so no peak passes a cap
// and no row is lost or reordered.
func TestCapSmallerThanBlocks(t *testing.T) {
	tests := []struct {
		name string
		ds   *data.Dataset[int]
	}{
		{"operator", data.Map(data.Range(1000, data.BlockRows(100)), square, data.MaxRowsInFlight(30))},
		{"batches", data.MapBatches(data.Range(1000, data.BlockRows(100)), func(_ context.Context, xs []int) ([]int, error) {
			out := make([]int, len(xs))
			for i, x := range xs {
				out[i] = x * x
			}
			return out, nil
		}, data.BatchSize(7), data.MaxRowsInFlight(20))},
		{"source", data.Map(data.Range(1000, data.BlockRows(100), data.MaxRowsInFlight(16)), square)},
	}
	t.Run("made but not taken", func(t *testing.T) {
		is := is.New(t)
		var made atomic.Int64
		ds := data.Map(data.Range(1000, data.BlockRows(100)), func(_ context.Context, x int) (int, error) {
			made.Add(1)
			return x, nil
		}, data.MaxRowsInFlight(30))
		var taken int64
		for _, err := range data.Rows(context.Background(), ds) {
			is.NoErr(err)
			is.True(made.Load()-taken <= 30)
			taken++
		}
		is.Equal(taken, int64(1000))
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var st data.Stats
			got, err := data.Take(context.Background(), tt.ds, 2000, data.CollectStats(&st))
			is.NoErr(err)
			is.Equal(got, want(1000, func(i int) []int { return []int{i * i} }))
			for _, o := range st.Operators {
				is.True(o.PeakRowsInFlight <= o.MaxRowsInFlight)
				is.Equal(o.RowsIn, int64(1000))
			}
		})
	}
}
