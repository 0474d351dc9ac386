package data_test

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// keyRow is a row of TestSortByKeyTypes: a key and its input position.
type keyRow[K any] struct {
	K   K
	Pos int
}

type namedInt int16

// checkSortBy sorts rows by K with data.SortBy, ascending and descending,
// in memory and spilled, and checks each against slices.SortStableFunc
// with cmp.Compare: the same order, ties in input order.
func checkSortBy[K cmp.Ordered](t *testing.T, keys []K) {
	t.Helper()
	is := is.New(t)
	rows := make([]keyRow[K], len(keys))
	for i, k := range keys {
		rows[i] = keyRow[K]{k, i}
	}
	for _, desc := range []bool{false, true} {
		want := slices.Clone(rows)
		slices.SortStableFunc(want, func(a, b keyRow[K]) int {
			if desc {
				return cmp.Compare(b.K, a.K)
			}
			return cmp.Compare(a.K, b.K)
		})
		for _, budget := range []int64{0, 64 << 10} {
			var opts []data.Option
			if desc {
				opts = append(opts, data.Descending())
			}
			if budget > 0 {
				opts = append(opts, data.MemoryBudget(budget))
			}
			got := collect(t, data.SortBy(data.FromItems(rows), func(r keyRow[K]) K { return r.K }, opts...))
			is.Equal(len(got), len(want)) // every row comes out once
			for i := range got {
				// Compare positions: NaN keys are not equal to themselves.
				if got[i].Pos != want[i].Pos {
					t.Fatalf("%T desc=%v budget=%d: row %d is input row %d (key %v), want input row %d (key %v)",
						keys, desc, budget, i, got[i].Pos, got[i].K, want[i].Pos, want[i].K)
				}
			}
		}
	}
}

// TestSortByKeyTypes: SortBy orders every kind of ordered key as
// cmp.Compare does (NaN first, -0 equal to +0, negative numbers, the
// extremes of each type, a named type), stably, ascending and descending,
// in memory and spilled. Integer and float keys take the radix sort,
// strings pdqsort.
func TestSortByKeyTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 20_000
	pick := func(special []float64) float64 {
		if rng.IntN(4) == 0 {
			return special[rng.IntN(len(special))]
		}
		return (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(20)-10))
	}
	specials := []float64{math.NaN(), -math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1),
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 1, -1}
	f64 := make([]float64, n)
	f32 := make([]float32, n)
	for i := range f64 {
		f64[i] = pick(specials)
		f32[i] = float32(pick(specials))
	}
	checkSortBy(t, f64)
	checkSortBy(t, f32)

	ints := make([]int, n)
	i8 := make([]int8, n)
	i32 := make([]int32, n)
	u64 := make([]uint64, n)
	u8 := make([]uint8, n)
	named := make([]namedInt, n)
	few := make([]int64, n) // many ties
	for i := range ints {
		switch rng.IntN(5) {
		case 0:
			ints[i] = math.MinInt
		case 1:
			ints[i] = math.MaxInt
		default:
			ints[i] = int(rng.Uint64())
		}
		i8[i] = int8(rng.Uint32())
		i32[i] = int32(rng.Uint32())
		u64[i] = rng.Uint64() >> rng.IntN(64)
		u8[i] = uint8(rng.Uint32())
		named[i] = namedInt(rng.IntN(1000) - 500)
		few[i] = int64(rng.IntN(3)) - 1
	}
	checkSortBy(t, ints)
	checkSortBy(t, i8)
	checkSortBy(t, i32)
	checkSortBy(t, u64)
	checkSortBy(t, u8)
	checkSortBy(t, named)
	checkSortBy(t, few)
	checkSortBy(t, []int{42}) // one row
	checkSortBy(t, []int{})   // none

	strs := make([]string, n)
	for i := range strs {
		strs[i] = string(rune('a' + rng.IntN(26)))
	}
	checkSortBy(t, strs)
}

// checkGroupBy sums rows by key with data.GroupBy, in memory and spilled,
// and checks the groups against a Go map: every key once, in key order,
// with its sum and count.
func checkGroupBy[K cmp.Ordered](t *testing.T, keys []K) {
	t.Helper()
	is := is.New(t)
	sums := map[K]int{}
	for i, k := range keys {
		sums[k] += i
	}
	want := make([]data.Group[K, int], 0, len(sums))
	for k, s := range sums {
		want = append(want, data.Group[K, int]{Key: k, Value: s})
	}
	slices.SortFunc(want, func(a, b data.Group[K, int]) int { return cmp.Compare(a.Key, b.Key) })
	rows := make([]keyRow[K], len(keys))
	for i, k := range keys {
		rows[i] = keyRow[K]{k, i}
	}
	for _, budget := range []int64{0, 64 << 10} {
		var opts []data.Option
		if budget > 0 {
			opts = append(opts, data.MemoryBudget(budget))
		}
		got := collect(t, data.GroupBy(data.FromItems(rows), func(r keyRow[K]) K { return r.K },
			data.SumOf(func(r keyRow[K]) int { return r.Pos })), opts...)
		is.Equal(len(got), len(want)) // groups
		if len(want) > 0 {
			is.Equal(got, want) // budget 0: in memory; else spilled
		}
	}
}

// TestGroupByIntKeys: GroupBy's table for integer keys (their bits,
// hashed) finds every key of every integer kind: negative keys, zero, the
// extremes, keys that differ only in high bits, thousands of groups (the
// table grows) and few, in memory and spilled.
func TestGroupByIntKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 20_000
	ints := make([]int, n)
	high := make([]int64, n)
	i8 := make([]int8, n)
	u16 := make([]uint16, n)
	u64 := make([]uint64, n)
	for i := range ints {
		switch rng.IntN(10) {
		case 0:
			ints[i] = math.MinInt
		case 1:
			ints[i] = math.MaxInt
		case 2:
			ints[i] = 0
		default:
			ints[i] = rng.IntN(5000) - 2500
		}
		high[i] = int64(rng.IntN(3000)) << 40
		i8[i] = int8(rng.Uint32())
		u16[i] = uint16(rng.Uint32())
		u64[i] = rng.Uint64() >> rng.IntN(64)
	}
	checkGroupBy(t, ints)
	checkGroupBy(t, high)
	checkGroupBy(t, i8)
	checkGroupBy(t, u16)
	checkGroupBy(t, u64)
	checkGroupBy(t, []namedInt{3, -3, 3, 0})
	checkGroupBy(t, []int{})
}
