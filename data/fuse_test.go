package data_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// TestFusedOperators runs Map → Filter → Map (which run in one stage when
// their options allow) with bad rows in two of them, fused and with each
// option that keeps them apart, and checks that the rows, their order,
// each operator's counters, the bad rows (operator, position, cause) and
// the caps are what running them one by one gives.
func TestFusedOperators(t *testing.T) {
	const n = 10_000
	errSeven := errors.New("multiple of 7")
	errEleven := errors.New("multiple of 11")
	sq := func(_ context.Context, x int) (int, error) { return x * x, nil }
	keep := func(_ context.Context, x int) (bool, error) {
		if x%7 == 0 {
			return false, errSeven
		}
		return x%2 == 0, nil
	}
	plus := func(_ context.Context, x int) (int, error) {
		if x%11 == 0 {
			return 0, errEleven
		}
		return x + 1, nil
	}
	// What the run must give, computed by hand.
	var want []int
	var wantBad []data.RowError
	filtered, mapped := 0, 0
	for i := range n {
		x := i * i
		if x%7 == 0 {
			wantBad = append(wantBad, data.RowError{Op: "filter", Pos: data.Pos{Row: int64(i)}, Err: errSeven})
			continue
		}
		if x%2 != 0 {
			continue
		}
		filtered++
		if x%11 == 0 {
			wantBad = append(wantBad, data.RowError{Op: "map", Pos: data.Pos{Row: int64(i)}, Err: errEleven})
			continue
		}
		mapped++
		want = append(want, x+1)
	}
	const capRows = 300
	for _, c := range []struct {
		name     string
		run, op2 []data.Option
	}{
		{"fused", nil, nil},
		{"unordered", []data.Option{data.Unordered()}, nil},
		{"smaller cap apart", nil, []data.Option{data.MaxRowsInFlight(capRows / 2)}},
		{"concurrency apart", nil, []data.Option{data.Concurrency(1)}},
		{"byte cap apart", []data.Option{data.MaxBytesInFlight(1 << 20)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			is := is.New(t)
			ds := data.Map(data.Filter(data.Map(data.Range(n, data.BlockRows(100)), sq), keep, c.op2...), plus)
			var st data.Stats
			opts := append([]data.Option{data.SkipBadRows(n), data.CollectStats(&st), data.MaxRowsInFlight(capRows),
				data.Concurrency(3), data.Progress(false)}, c.run...)
			got := collect(t, ds, opts...)
			if c.name == "unordered" {
				slices.Sort(got)
			}
			is.Equal(got, want) // the rows, in order
			ops := st.Operators
			is.Equal(len(ops), 4) // range, map, filter, map
			is.Equal(ops[1].RowsIn, int64(n))
			is.Equal(ops[1].RowsOut, int64(n))
			is.Equal(ops[2].RowsIn, int64(n))
			is.Equal(ops[2].RowsOut, int64(filtered))
			is.Equal(ops[2].BadRows, int64(countOp(wantBad, "filter")))
			is.Equal(ops[3].RowsIn, int64(filtered))
			is.Equal(ops[3].RowsOut, int64(mapped))
			is.Equal(ops[3].BadRows, int64(countOp(wantBad, "map")))
			is.Equal(ops[3].BadRows, int64(filtered-mapped))
			for _, o := range ops {
				is.True(o.PeakRowsInFlight <= o.MaxRowsInFlight) // within the cap
				is.True(o.PeakRowsInFlight > 0)
				is.Equal(o.RowsInFlight, int64(0)) // everything released
			}
			bad := slices.Clone(st.BadRows)
			slices.SortFunc(bad, func(a, b data.RowError) int { return int(a.Pos.Row - b.Pos.Row) })
			is.Equal(len(bad), len(wantBad))
			for i, b := range bad {
				is.Equal(b.Op, wantBad[i].Op)
				is.Equal(b.Pos.Row, wantBad[i].Pos.Row)
				is.True(errors.Is(b.Err, wantBad[i].Err))
			}
		})
	}
}

func countOp(bad []data.RowError, op string) int {
	n := 0
	for _, b := range bad {
		if b.Op == op {
			n++
		}
	}
	return n
}

// TestFusedOperatorsFailFirstBadRow: without SkipBadRows, a bad row in the
// second operator of a stage fails the run with its RowError.
func TestFusedOperatorsFailFirstBadRow(t *testing.T) {
	is := is.New(t)
	boom := errors.New("boom")
	ds := data.Map(data.Map(data.Range(5000), square), func(_ context.Context, x int) (int, error) {
		if x == 1234*1234 {
			return 0, boom
		}
		return x, nil
	})
	_, err := data.Count(context.Background(), ds, data.Progress(false))
	var re *data.RowError
	is.True(errors.As(err, &re))
	is.Equal(re.Op, "map")
	is.Equal(re.Pos.Row, int64(1234))
	is.True(errors.Is(err, boom))
}

// TestFusedOperatorsLeaveInputAlone: operators after the first of a stage
// write their output over their input rows, which must never be rows the
// user's code still holds: items given to FromItems, or the slice a
// MapBatches function returned and kept.
func TestFusedOperatorsLeaveInputAlone(t *testing.T) {
	is := is.New(t)
	items := make([]int, 3000)
	for i := range items {
		items[i] = i
	}
	orig := slices.Clone(items)
	var kept [][]int
	keepBatch := func(_ context.Context, rows []int) ([]int, error) {
		kept = append(kept, rows) // the function holds on to what it returns
		return rows, nil
	}
	twice := func(_ context.Context, x int) (int, error) { return 2 * x, nil }
	ds := data.Map(data.Filter(data.MapBatches(data.Map(data.Filter(data.FromItems(items), even), twice), keepBatch), even), twice)
	got := collect(t, ds, data.Concurrency(1), data.Progress(false))
	is.Equal(len(got), 1500)
	is.Equal(got[1], 8)   // 2 → 4 → 8
	is.Equal(items, orig) // FromItems' rows untouched
	var fromBatches []int // what MapBatches returned, as it returned it
	for _, b := range kept {
		fromBatches = append(fromBatches, b...)
	}
	for i, x := range fromBatches {
		is.Equal(x, 4*i) // the rows MapBatches returned are untouched
	}
}

// TestFusedInFlightCap: a stage of two operators with one cap holds no
// more rows than the cap between the source and a slow sink, and reaches
// it.
func TestFusedInFlightCap(t *testing.T) {
	is := is.New(t)
	const (
		total  = 20_000
		block  = 10
		capRow = 100
	)
	var made atomic.Int64
	ds := data.Map(data.Map(data.Range(total, data.BlockRows(block)), square), func(_ context.Context, x int) (int, error) {
		made.Add(1)
		return x, nil
	})
	var st data.Stats
	var taken, peak int64
	for _, err := range data.Rows(context.Background(), ds, data.MaxRowsInFlight(capRow), data.Concurrency(2), data.CollectStats(&st), data.Progress(false)) {
		is.NoErr(err)
		if taken%block == 0 {
			for made.Load()-taken < capRow/2 && made.Load() < total {
				runtime.Gosched()
			}
		}
		ahead := made.Load() - taken
		is.True(ahead <= capRow) // never more than the cap in flight
		peak = max(peak, ahead)
		taken++
	}
	is.Equal(taken, int64(total))
	is.True(peak >= capRow/2)
	for _, o := range st.Operators {
		is.True(o.PeakRowsInFlight <= o.MaxRowsInFlight)
		is.Equal(o.RowsInFlight, int64(0))
	}
}

// TestFilterCallsEachRowOnce: Filter's kernel runs a tight loop until a
// row is dropped or fails, then goes on row by row. Each row is passed
// to the function exactly once, whether Filter is first in its stage
// (over a source's block) or fused after a Map, and the rows kept, the
// bad rows and their positions come out as row by row.
func TestFilterCallsEachRowOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		ds   func(f func(context.Context, int) (bool, error)) *data.Dataset[int]
	}{
		{"first in its stage", func(f func(context.Context, int) (bool, error)) *data.Dataset[int] {
			return data.Filter(data.Range(5000), f)
		}},
		{"fused after a map", func(f func(context.Context, int) (bool, error)) *data.Dataset[int] {
			id := func(_ context.Context, x int) (int, error) { return x, nil }
			return data.Filter(data.Map(data.Range(5000), id), f)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			calls := make([]atomic.Int32, 5000)
			boom := errors.New("boom")
			f := func(_ context.Context, x int) (bool, error) {
				calls[x].Add(1)
				switch {
				case x%1000 < 300: // long runs kept: the tight loop
					return true, nil
				case x%7 == 3:
					return false, boom
				default:
					return x%2 == 0, nil
				}
			}
			var st data.Stats
			var want []int
			bad := 0
			for x := range 5000 {
				switch {
				case x%1000 < 300:
					want = append(want, x)
				case x%7 == 3:
					bad++
				case x%2 == 0:
					want = append(want, x)
				}
			}
			got := collect(t, tc.ds(f), data.SkipBadRows(5000), data.CollectStats(&st), data.Progress(false))
			is.Equal(got, want)
			for x := range calls {
				if n := calls[x].Load(); n != 1 {
					t.Fatalf("row %d: the filter was called %d times, want once", x, n)
				}
			}
			var badRows int64
			for _, op := range st.Operators {
				badRows += op.BadRows
			}
			is.Equal(badRows, int64(bad))
			is.Equal(len(st.BadRows), bad)
			for _, e := range st.BadRows {
				is.Equal(e.Pos.Row%7, int64(3)) // each bad row's own position
				is.True(e.Pos.Row%1000 >= 300)
			}
		})
	}
}
