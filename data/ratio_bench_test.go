package data_test

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/goray-dev/goray/data"
)

// vs runs work and base alternately in every iteration (which one goes
// first alternates too), so that load on the machine falls on both, and
// reports the ratio of their total times as "x-base" (2 means work took
// twice as long as base), and each one's time per run.
func vs(b *testing.B, work, base func(b *testing.B)) {
	var tw, tb time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			t0 := time.Now()
			work(b)
			t1 := time.Now()
			base(b)
			tw, tb = tw+t1.Sub(t0), tb+time.Since(t1)
		} else {
			t0 := time.Now()
			base(b)
			t1 := time.Now()
			work(b)
			tb, tw = tb+t1.Sub(t0), tw+time.Since(t1)
		}
		i++
	}
	b.ReportMetric(float64(tw)/float64(tb), "x-base")
	b.ReportMetric(float64(tw.Nanoseconds())/float64(i), "work-ns")
	b.ReportMetric(float64(tb.Nanoseconds())/float64(i), "base-ns")
	b.ReportMetric(0, "ns/op") // both runs are in it: meaningless alone
}

// BenchmarkVs measures data against hand-written Go doing the same work,
// each pair alternating in the same benchmark so that the machine's load
// affects both; x-base is data's time over the baseline's:
//
//	go test -run '^$' -bench 'BenchmarkVs' -benchtime 5x -count 5 ./data/
//
// sort: SortBy of 1M random ints in memory against slices.SortFunc of a
// copy (then read). sort_spill: the same SortBy with a MemoryBudget of a
// tenth of the rows (spilling runs to files and merging them) against the
// same baseline. groupby: GroupBy with SumOf into 1,000 groups against a
// map by hand whose keys are then sorted (data's output is in key order).
// groupby_spill: 500,000 groups under a budget of a tenth of what they
// hold. pipeline: Range → Map → Filter → Map → Count of 200,000 ints
// against the same by hand, a goroutine per stage and 256-row slices over
// channels.
func BenchmarkVs(b *testing.B) {
	ctx := context.Background()
	xs := randomInts(sortRows)
	id := func(x int) int { return x }
	handSort := func(b *testing.B) {
		ys := slices.Clone(xs)
		slices.SortFunc(ys, func(a, b int) int { return cmp.Compare(id(a), id(b)) })
		n := 0
		for range ys {
			n++
		}
		if n != sortRows {
			b.Fatal(n)
		}
	}
	dataSort := func(opts ...data.Option) func(b *testing.B) {
		return func(b *testing.B) {
			n, err := data.Count(ctx, data.SortBy(data.FromItems(xs), id), append(opts, data.Progress(false))...)
			if err != nil || n != sortRows {
				b.Fatal(n, err)
			}
		}
	}
	b.Run("sort", func(b *testing.B) { vs(b, dataSort(), handSort) })
	b.Run("sort_spill", func(b *testing.B) { vs(b, dataSort(data.MemoryBudget(sortRows*8/10)), handSort) })

	groupBy := func(groups int, opts ...data.Option) func(b *testing.B) {
		key := func(x int) int { return x % groups }
		want := map[int]bool{}
		for _, x := range xs {
			want[key(x)] = true
		}
		work := func(b *testing.B) {
			n, err := data.Count(ctx, data.GroupBy(data.FromItems(xs), key, data.SumOf(id)), append(opts, data.Progress(false))...)
			if err != nil || n != int64(len(want)) {
				b.Fatal(n, err)
			}
		}
		base := func(b *testing.B) {
			sums := map[int]int{}
			for _, x := range xs {
				sums[key(x)] += id(x)
			}
			keys := make([]int, 0, len(sums))
			for k := range sums {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if len(keys) != len(want) {
				b.Fatal(len(keys))
			}
		}
		return func(b *testing.B) { vs(b, work, base) }
	}
	b.Run("groupby", groupBy(1000))
	b.Run("groupby_spill", groupBy(500_000, data.MemoryBudget(500_000*32/10)))

	ds := data.Map(data.Filter(data.Map(data.Range(benchRows), triple), even), plusOne)
	b.Run("pipeline", func(b *testing.B) {
		vs(b, func(b *testing.B) {
			n, err := data.Count(ctx, ds, data.Progress(false))
			if err != nil || n != benchRows/2 {
				b.Fatal(n, err)
			}
		}, func(b *testing.B) {
			if n := handBatched(ctx, benchRows); n != benchRows/2 {
				b.Fatal(n)
			}
		})
	})
}
