package data_test

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goray-dev/goray/data"
)

// sortRows is the rows each all-to-all benchmark iteration sorts or
// groups: random ints, 8 MB.
const sortRows = 1_000_000

func randomInts(n int) []int {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]int, n)
	for i := range out {
		out[i] = rng.IntN(1 << 40)
	}
	return out
}

// BenchmarkSort sorts 1M random ints: data.SortBy within the default
// budget (in memory), data.SortBy with a budget of a tenth of the data
// (spilling runs to a temporary directory and merging them), and by hand
// (a copy sorted with slices.Sort, then read).
func BenchmarkSort(b *testing.B) {
	ctx := context.Background()
	xs := randomInts(sortRows)
	id := func(x int) int { return x }
	run := func(b *testing.B, opts ...data.Option) {
		for b.Loop() {
			n, err := data.Count(ctx, data.SortBy(data.FromItems(xs), id), opts...)
			if err != nil || n != sortRows {
				b.Fatal(n, err)
			}
		}
		b.ReportMetric(float64(sortRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("data", func(b *testing.B) { run(b) })
	b.Run("data_spill_budget_0.1x", func(b *testing.B) { run(b, data.MemoryBudget(sortRows*8/10)) })
	b.Run("hand_sortfunc", func(b *testing.B) {
		for b.Loop() {
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
		b.ReportMetric(float64(sortRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			ys := slices.Clone(xs)
			slices.Sort(ys)
			n := 0
			for range ys {
				n++
			}
			if n != sortRows {
				b.Fatal(n)
			}
		}
		b.ReportMetric(float64(sortRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkGroupBy sums 1M rows into groups: 1,000 groups (no spill) and
// 500,000 groups with a budget a tenth of what the groups hold (spilling),
// with data.GroupBy, against a map by hand whose keys are then sorted
// (data's output is in key order).
func BenchmarkGroupBy(b *testing.B) {
	ctx := context.Background()
	xs := randomInts(sortRows)
	for _, c := range []struct {
		name   string
		groups int
		opts   []data.Option
	}{
		{"1k_groups", 1000, nil},
		{"500k_groups_spill", 500_000, []data.Option{data.MemoryBudget(500_000 * 32 / 10)}},
	} {
		key := func(x int) int { return x % c.groups }
		groups := map[int]bool{}
		for _, x := range xs {
			groups[key(x)] = true
		}
		b.Run(c.name+"/data", func(b *testing.B) {
			for b.Loop() {
				n, err := data.Count(ctx, data.GroupBy(data.FromItems(xs), key, data.SumOf(func(x int) int { return x })), c.opts...)
				if err != nil || n != int64(len(groups)) {
					b.Fatal(n, err)
				}
			}
			b.ReportMetric(float64(sortRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(c.name+"/hand", func(b *testing.B) {
			for b.Loop() {
				sums := map[int]int{}
				for _, x := range xs {
					sums[key(x)] += x
				}
				keys := make([]int, 0, len(sums))
				for k := range sums {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				if len(keys) != len(groups) {
					b.Fatal(len(keys))
				}
			}
			b.ReportMetric(float64(sortRows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
