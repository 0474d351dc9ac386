package data_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// TestCountReusesOnlyFreeBlocks: Count keeps no rows, so it gives the
// arrays of the blocks it took back to the run's sources, but only blocks
// that no user function has seen. A block reused while something still
// holds it shows up as rows seen twice or missed, or as a slice a
// MapBatches function kept changing under it.
func TestCountReusesOnlyFreeBlocks(t *testing.T) {
	const total = 50_000
	ctx := context.Background()

	t.Run("every row once", func(t *testing.T) {
		for _, opts := range [][]data.Option{
			{data.Concurrency(1)},
			{data.Concurrency(4)},
			{data.Concurrency(4), data.Unordered()},
			{data.Concurrency(2), data.BlockRows(7)},
		} {
			is := is.New(t)
			var seen [total]atomic.Int32
			var sum atomic.Int64
			check := func(_ context.Context, x int) (bool, error) {
				seen[x/3].Add(1)
				return x%2 == 0, nil
			}
			// Map and Filter run in place on the source's blocks; the
			// last Map has a cap of its own, so it is a stage of its own
			// whose intake cuts the blocks into pieces.
			ds := data.Map(data.Filter(data.Map(data.Range(total), triple), check),
				func(_ context.Context, x int) (int, error) { sum.Add(int64(x)); return x + 1, nil },
				data.MaxRowsInFlight(100))
			for run := range 3 { // the second and third runs start with a fresh pool too
				n, err := data.Count(ctx, ds, append(opts, data.Progress(false))...)
				is.NoErr(err)
				is.Equal(n, int64(total/2))
				for i := range seen {
					if got := seen[i].Load(); got != int32(run+1) {
						t.Fatalf("run %d, options %d: row %d seen %d times, want %d", run, len(opts), i, got, run+1)
					}
				}
			}
			var want int64
			for i := 0; i < total; i += 2 {
				want += 3 * int64(i)
			}
			is.Equal(sum.Load(), 3*want) // every kept row, in 3 runs
		}
	})

	t.Run("kept slices", func(t *testing.T) {
		is := is.New(t)
		// A MapBatches function that keeps the slice it gets and returns
		// it to Count, fused after an in-place Map: that array must never
		// go back to the source.
		var kept, snap [][]int
		keep := func(_ context.Context, rows []int) ([]int, error) {
			kept = append(kept, rows)
			snap = append(snap, slices.Clone(rows))
			return rows, nil
		}
		ds := data.MapBatches(data.Map(data.Range(total), triple), keep)
		n, err := data.Count(ctx, ds, data.Concurrency(1), data.Progress(false))
		is.NoErr(err)
		is.Equal(n, int64(total))
		is.True(len(kept) > 1)
		for i := range kept {
			is.Equal(kept[i], snap[i]) // a kept slice was written over
		}
		var all []int
		for _, s := range snap {
			all = append(all, s...)
		}
		is.Equal(len(all), total)
		for i, x := range all {
			is.Equal(x, 3*i)
		}
	})
}
