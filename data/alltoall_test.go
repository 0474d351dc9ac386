package data_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
)

// rec is a row of the all-to-all tests: about 100 bytes, with a string so
// that sizes are estimated by walking it.
type rec struct {
	ID   int
	Key  string
	Val  float64
	Note string
}

func recs(n int, seed uint64) []rec {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]rec, n)
	for i := range out {
		k := rng.IntN(n/10 + 1)
		out[i] = rec{ID: i, Key: fmt.Sprintf("k%06d", k), Val: float64(rng.IntN(1000)), Note: strings.Repeat("x", 40+rng.IntN(20))}
	}
	return out
}

func collect[T any](t *testing.T, ds *data.Dataset[T], opts ...data.Option) []T {
	t.Helper()
	var out []T
	for v, err := range data.Rows(context.Background(), ds, opts...) {
		if err != nil {
			t.Fatalf("run failed: %v", err)
		}
		out = append(out, v)
	}
	return out
}

// memOf is the Memory stats of the operator named name.
func memOf(t *testing.T, st data.Stats, name string) data.MemoryStats {
	t.Helper()
	for _, o := range st.Operators {
		if o.Name == name && o.Memory != nil {
			return *o.Memory
		}
	}
	t.Fatalf("no memory stats for %s in %v", name, st)
	return data.MemoryStats{}
}

// emptyBucket says whether b holds no object.
func emptyBucket(t *testing.T, b storage.Bucket) bool {
	t.Helper()
	for o, err := range b.List(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("left behind: %s", o.Key)
		return false
	}
	return true
}

// tempSpillDirs lists the spill directories left in dir (TMPDIR).
func tempSpillDirs(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "goray-data-spill-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestAllToAllInMemory checks each operation's result against a plain Go
// computation, with the default budget (nothing spills).
func TestAllToAllInMemory(t *testing.T) {
	rows := recs(5000, 1)
	ds := data.FromItems(rows, data.BlockRows(97))
	byID := func(a, b rec) int { return cmp.Compare(a.ID, b.ID) }

	t.Run("sort", func(t *testing.T) {
		is := is.New(t)
		got := collect(t, data.Sort(ds, func(a, b rec) int { return cmp.Compare(a.Key, b.Key) }))
		want := slices.Clone(rows)
		slices.SortStableFunc(want, func(a, b rec) int { return cmp.Compare(a.Key, b.Key) })
		is.Equal(got, want) // stable: equal keys keep input order
	})
	t.Run("sort_by descending", func(t *testing.T) {
		is := is.New(t)
		got := collect(t, data.SortBy(ds, func(r rec) float64 { return r.Val }, data.Descending()))
		want := slices.Clone(rows)
		slices.SortStableFunc(want, func(a, b rec) int { return cmp.Compare(b.Val, a.Val) })
		is.Equal(got, want)
	})
	t.Run("group_by", func(t *testing.T) {
		is := is.New(t)
		key := func(r rec) string { return r.Key }
		counts := collect(t, data.GroupBy(ds, key, data.CountOf[rec]()))
		sums := collect(t, data.GroupBy(ds, key, data.SumOf(func(r rec) float64 { return r.Val })))
		mins := collect(t, data.GroupBy(ds, key, data.MinOf(func(r rec) int { return r.ID })))
		maxs := collect(t, data.GroupBy(ds, key, data.MaxOf(func(r rec) int { return r.ID })))
		means := collect(t, data.GroupBy(ds, key, data.MeanOf(func(r rec) float64 { return r.Val })))
		wc, ws, wmin, wmax := map[string]int64{}, map[string]float64{}, map[string]int{}, map[string]int{}
		for _, r := range rows {
			if _, ok := wc[r.Key]; !ok {
				wmin[r.Key], wmax[r.Key] = r.ID, r.ID
			}
			wc[r.Key]++
			ws[r.Key] += r.Val
			wmin[r.Key], wmax[r.Key] = min(wmin[r.Key], r.ID), max(wmax[r.Key], r.ID)
		}
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range wc {
				if !yield(k) {
					return
				}
			}
		})
		is.Equal(len(counts), len(keys))
		for i, k := range keys {
			is.Equal(counts[i], data.Group[string, int64]{k, wc[k]}) // in key order
			is.Equal(sums[i], data.Group[string, float64]{k, ws[k]})
			is.Equal(mins[i].Value, wmin[k])
			is.Equal(maxs[i].Value, wmax[k])
			is.Equal(means[i].Value, ws[k]/float64(wc[k]))
		}
	})
	t.Run("map_groups", func(t *testing.T) {
		is := is.New(t)
		got := collect(t, data.MapGroups(ds, func(r rec) string { return r.Key }, func(_ context.Context, k string, g []rec) ([]string, error) {
			ids := make([]string, len(g))
			for i, r := range g {
				ids[i] = fmt.Sprint(r.ID)
			}
			return []string{k + ":" + strings.Join(ids, ",")}, nil
		}))
		groups := map[string][]string{}
		for _, r := range rows {
			groups[r.Key] = append(groups[r.Key], fmt.Sprint(r.ID))
		}
		is.Equal(len(got), len(groups))
		for i, line := range got {
			k, ids, _ := strings.Cut(line, ":")
			is.Equal(ids, strings.Join(groups[k], ",")) // rows in input order
			if i > 0 {
				is.True(got[i-1] < line)
			}
		}
	})
	t.Run("join", func(t *testing.T) {
		is := is.New(t)
		type price struct {
			Key   string
			Price int
		}
		var prices []price
		for i := range 300 { // keys k000000..: some match, some do not
			prices = append(prices, price{fmt.Sprintf("k%06d", i*2), i})
			if i%7 == 0 {
				prices = append(prices, price{fmt.Sprintf("k%06d", i*2), -i}) // two matches
			}
		}
		right := data.FromItems(prices)
		inner := collect(t, data.Join(ds, right, func(r rec) string { return r.Key }, func(p price) string { return p.Key }))
		left := collect(t, data.LeftJoin(ds, right, func(r rec) string { return r.Key }, func(p price) string { return p.Key }))
		var wantInner, wantLeft []data.Joined[rec, price]
		sorted := slices.Clone(rows)
		slices.SortStableFunc(sorted, func(a, b rec) int { return cmp.Compare(a.Key, b.Key) })
		for _, r := range sorted {
			matched := false
			for _, p := range prices {
				if p.Key == r.Key {
					wantInner = append(wantInner, data.Joined[rec, price]{r, p, true})
					wantLeft = append(wantLeft, data.Joined[rec, price]{r, p, true})
					matched = true
				}
			}
			if !matched {
				wantLeft = append(wantLeft, data.Joined[rec, price]{Left: r})
			}
		}
		is.True(len(wantInner) > 100 && len(wantLeft) > len(wantInner))
		is.Equal(inner, wantInner)
		is.Equal(left, wantLeft)
	})
	t.Run("random_shuffle", func(t *testing.T) {
		is := is.New(t)
		a := collect(t, data.RandomShuffle(ds, 7))
		b := collect(t, data.RandomShuffle(ds, 7))
		c := collect(t, data.RandomShuffle(ds, 8))
		is.Equal(a, b)               // same seed, same order
		is.True(!slices.Equal(a, c)) // another seed, another order
		is.True(!slices.Equal(a, rows))
		slices.SortFunc(a, byID)
		is.Equal(a, rows) // a permutation
	})
	t.Run("repartition", func(t *testing.T) {
		is := is.New(t)
		var sizes []int
		got := collect(t, data.MapBatches(data.Repartition(ds, 7), func(_ context.Context, b []rec) ([]rec, error) {
			sizes = append(sizes, len(b))
			return b, nil
		}, data.Concurrency(1)))
		is.Equal(got, rows)
		is.Equal(sizes, []int{715, 715, 714, 714, 714, 714, 714})
		few := collect(t, data.Repartition(data.Range(3), 5))
		is.Equal(few, []int{0, 1, 2})
	})
	t.Run("union limit skip", func(t *testing.T) {
		is := is.New(t)
		u := data.Union(data.Range(5), data.Map(data.Range(3), square), data.FromItems([]int{42}))
		is.Equal(collect(t, u), []int{0, 1, 2, 3, 4, 0, 1, 4, 42})
		uu := collect(t, u, data.Unordered())
		slices.Sort(uu)
		is.Equal(uu, []int{0, 0, 1, 1, 2, 3, 4, 4, 42})
		is.Equal(collect(t, data.Limit(data.Range(1000, data.BlockRows(7)), 10)), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
		is.Equal(len(collect(t, data.Limit(data.Range(10), 0))), 0)
		is.Equal(len(collect(t, data.Limit(data.Range(10), 100))), 10)
		is.Equal(collect(t, data.Skip(data.Range(10, data.BlockRows(3)), 7)), []int{7, 8, 9})
		is.Equal(collect(t, data.Limit(data.Skip(data.Range(100), 50), 2)), []int{50, 51})
	})
}

// TestLimitStopsUpstream: a Limit on an endless source returns at once,
// and the source stops: it is not read to its end.
func TestLimitStopsUpstream(t *testing.T) {
	is := is.New(t)
	var read int64
	var mu sync.Mutex
	ds := data.Map(data.Range(1<<40), func(_ context.Context, x int) (int, error) {
		mu.Lock()
		read++
		mu.Unlock()
		return x, nil
	})
	var st data.Stats
	got, err := data.Take(context.Background(), data.Map(data.Limit(ds, 5), square), 100, data.CollectStats(&st))
	is.NoErr(err)
	is.Equal(got, []int{0, 1, 4, 9, 16})
	mu.Lock()
	defer mu.Unlock()
	is.True(read < 1<<20) // stopped, not read to the end
	is.NoErr(st.Err)
}

// TestSpillBoundedAndExact runs each spilling operation on a dataset ten
// times its memory budget: the results are exact (against a plain Go
// computation), the peak estimated bytes held stay at or under the
// budget, something was spilled, and no spill file is left afterwards,
// in a bucket given by SpillTo or in the default temporary directory.
func TestSpillBoundedAndExact(t *testing.T) {
	const budget = 256 << 10
	rows := recs(40_000, 2) // ~ 4 MB estimated: over ten times the budget
	ds := data.FromItems(rows)
	sortedByKey := slices.Clone(rows)
	slices.SortStableFunc(sortedByKey, func(a, b rec) int { return cmp.Compare(a.Key, b.Key) })
	countByID := map[int]int64{}
	for _, r := range rows {
		countByID[r.ID%5000]++
	}

	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, where := range []string{"bucket", "tempdir"} {
		t.Run(where, func(t *testing.T) {
			b := storage.NewMem()
			defer b.Close()
			opts := []data.Option{data.MemoryBudget(budget)}
			if where == "bucket" {
				opts = append(opts, data.SpillTo(b))
			}
			check := func(t *testing.T, st data.Stats, op string, is *is.I) {
				m := memOf(t, st, op)
				t.Logf("%s: %+v", op, m)
				is.True(m.PeakBytes <= budget)
				is.True(m.PeakBytes > budget/2) // the budget was used
				is.True(m.SpillFiles > 0)
				is.True(m.SpilledRows > 0)
				is.True(emptyBucket(t, b))
				is.Equal(len(tempSpillDirs(t, tmp)), 0)
			}
			t.Run("sort", func(t *testing.T) {
				is := is.New(t)
				var st data.Stats
				got := collect(t, data.SortBy(ds, func(r rec) string { return r.Key }), append(opts, data.CollectStats(&st))...)
				is.Equal(got, sortedByKey)
				check(t, st, "sort", is)
				is.True(memOf(t, st, "sort").MergePasses > 0) // more runs than one merge reads
			})
			t.Run("group_by", func(t *testing.T) {
				is := is.New(t)
				var st data.Stats
				got := collect(t, data.GroupBy(ds, func(r rec) int { return r.ID % 5000 }, data.CountOf[rec]()), append(opts, data.CollectStats(&st), data.MemoryBudget(data.MinMemoryBudget))...)
				is.Equal(len(got), 5000)
				for i, g := range got {
					is.Equal(g.Key, i)
					is.Equal(g.Value, countByID[i])
				}
				m := memOf(t, st, "group_by")
				is.True(m.PeakBytes <= data.MinMemoryBudget)
				is.True(m.SpillFiles > 0)
				is.True(emptyBucket(t, b))
			})
			t.Run("join", func(t *testing.T) {
				is := is.New(t)
				var st data.Stats
				got := collect(t, data.Join(ds, ds, func(r rec) int { return r.ID }, func(r rec) int { return r.ID }), append(opts, data.CollectStats(&st))...)
				is.Equal(len(got), len(rows))
				for i, j := range got {
					is.Equal(j.Left, rows[i])
					is.Equal(j.Right, rows[i])
				}
				check(t, st, "join", is)
			})
			t.Run("random_shuffle", func(t *testing.T) {
				is := is.New(t)
				var st data.Stats
				got := collect(t, data.RandomShuffle(ds, 3), append(opts, data.CollectStats(&st))...)
				again := collect(t, data.RandomShuffle(ds, 3), opts...)
				is.Equal(got, again)
				slices.SortFunc(got, func(a, b rec) int { return cmp.Compare(a.ID, b.ID) })
				is.Equal(got, rows)
				check(t, st, "random_shuffle", is)
			})
			t.Run("repartition", func(t *testing.T) {
				is := is.New(t)
				var st data.Stats
				got := collect(t, data.Repartition(ds, 3), append(opts, data.CollectStats(&st))...)
				is.Equal(got, rows)
				check(t, st, "repartition", is)
			})
		})
	}
}

// TestSpillUnexportedFields: a row type with an unexported field cannot
// be spilled faithfully by gob: the run fails, naming the field, when
// the rows first pass the budget, and it works when they fit.
func TestSpillUnexportedFields(t *testing.T) {
	is := is.New(t)
	type hidden struct {
		N    int
		note string
	}
	rows := make([]hidden, 20_000)
	for i := range rows {
		rows[i] = hidden{N: len(rows) - i, note: "n"}
	}
	ds := data.SortBy(data.FromItems(rows), func(h hidden) int { return h.N })
	_, err := data.Count(context.Background(), ds, data.MemoryBudget(data.MinMemoryBudget))
	is.True(err != nil)
	t.Log(err)
	is.True(strings.Contains(err.Error(), "field data_test.hidden.note is unexported"))
	is.True(strings.Contains(err.Error(), "raise MemoryBudget"))
	n, err := data.Count(context.Background(), ds) // fits the default budget
	is.NoErr(err)
	is.Equal(n, int64(len(rows)))
}

// TestAllToAllBadInput: nil functions, counts out of range and a budget
// too small are InvalidArgument errors naming what was wrong and what is
// valid.
func TestAllToAllBadInput(t *testing.T) {
	ctx := context.Background()
	r := data.Range(10)
	id := func(x int) int { return x }
	tests := []struct {
		name string
		ds   *data.Dataset[int]
		opts []data.Option
		msg  string
	}{
		{"sort nil cmp", data.Sort(r, nil), nil, "data.Sort: cmp is nil; pass a dataset and a func(a, b T) int"},
		{"sort nil dataset", data.Sort[int](nil, cmp.Compare[int]), nil, "data.Sort: dataset is nil"},
		{"sort_by nil key", data.SortBy[int, int](r, nil), nil, "data.SortBy: key is nil"},
		{"budget", data.SortBy(r, id), []data.Option{data.MemoryBudget(1000)}, "MemoryBudget(1000): must be at least MinMemoryBudget (65536 bytes, 64 KiB)"},
		{"budget on op", data.SortBy(r, id, data.MemoryBudget(-1)), nil, "MemoryBudget(-1): must be at least"},
		{"spill nil", data.SortBy(r, id), []data.Option{data.SpillTo(nil)}, "SpillTo(nil): pass a storage.Bucket"},
		{"repartition", data.Repartition(r, 0), nil, "data.Repartition(0): the number of blocks must be at least 1"},
		{"limit", data.Limit(r, -1), nil, "data.Limit(-1): n must be 0 or more"},
		{"skip", data.Skip(r, -2), nil, "data.Skip(-2): n must be 0 or more"},
		{"union none", data.Union[int](), nil, "data.Union: no datasets"},
		{"union nil", data.Union(r, nil), nil, "data.Union: dataset 1 of 2 is nil"},
		{"shard n", data.Shard(r, 0, 0), nil, "data.Shard(n=0, i=0): n must be at least 1"},
		{"shard i", data.Shard(r, 3, 3), nil, "data.Shard(n=3, i=3): i must be in [0, 3)"},
		{"map_groups nil fn", data.MapGroups[int, int, int](r, id, nil), nil, "data.MapGroups: fn is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := data.Count(ctx, tt.ds, tt.opts...)
			is.True(err != nil)
			t.Log(err)
			is.True(strings.Contains(err.Error(), tt.msg))
			is.True(errors.Is(err, ray.ErrInvalidArgument))
		})
	}
	t.Run("group_by agg", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Count(ctx, data.GroupBy(r, id, data.Agg[int, int, int]{Add: func(a, x int) int { return a + x }}))
		is.True(strings.Contains(err.Error(), "data.GroupBy: the aggregation's Merge is nil; an Agg needs Add, Merge and Result"))
		is.True(errors.Is(err, ray.ErrInvalidArgument))
		_, err = data.Count(ctx, data.GroupBy[int, int](r, nil, data.CountOf[int]()))
		is.True(strings.Contains(err.Error(), "data.GroupBy: key is nil"))
	})
	t.Run("join", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Count(ctx, data.Join(r, nil, id, id))
		is.True(strings.Contains(err.Error(), "data.Join: the right dataset is nil"))
		_, err = data.Count(ctx, data.LeftJoin(r, r, nil, id))
		is.True(strings.Contains(err.Error(), "data.LeftJoin: lkey is nil"))
	})
	t.Run("split", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Split(ctx, r, 0)
		is.True(strings.Contains(err.Error(), "data.Split(0): n must be at least 1"))
		is.True(errors.Is(err, ray.ErrInvalidArgument))
		_, err = data.Split(ctx, r, 2, data.MemoryBudget(5))
		is.True(strings.Contains(err.Error(), "MemoryBudget(5)"))
	})
}

// TestAllToAllFailures: a panic or an error in a user function, and a
// failing input, fail the run, and no result comes back as complete; no
// spill file is left.
func TestAllToAllFailures(t *testing.T) {
	ctx := context.Background()
	b := storage.NewMem()
	defer b.Close()
	opts := []data.Option{data.MemoryBudget(data.MinMemoryBudget), data.SpillTo(b)}
	big := data.Range(50_000)

	t.Run("panic in cmp", func(t *testing.T) {
		is := is.New(t)
		n, err := data.Count(ctx, data.Sort(big, func(a, b int) int {
			if a == 40_000 {
				panic("cmp broke")
			}
			return cmp.Compare(a, b)
		}), opts...)
		var pe *data.PanicError
		is.True(errors.As(err, &pe))
		is.Equal(pe.Op, "sort")
		is.Equal(pe.Value, "cmp broke")
		is.Equal(n, int64(0))
		is.True(emptyBucket(t, b))
	})
	t.Run("panic in agg", func(t *testing.T) {
		is := is.New(t)
		agg := data.CountOf[int]()
		agg.Merge = func(a, b int64) int64 { panic("merge broke") }
		_, err := data.Count(ctx, data.GroupBy(big, func(x int) int { return x % 20_000 }, agg), opts...)
		var pe *data.PanicError
		is.True(errors.As(err, &pe))
		is.Equal(pe.Value, "merge broke")
		is.True(emptyBucket(t, b))
	})
	t.Run("upstream bad row", func(t *testing.T) {
		is := is.New(t)
		ds := data.Map(big, func(_ context.Context, x int) (int, error) {
			if x == 45_000 {
				return 0, errors.New("no")
			}
			return x, nil
		})
		got, err := data.Take(ctx, data.SortBy(ds, func(x int) int { return -x }), 10, opts...)
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos.Row, int64(45_000))
		is.Equal(got, nil)
		is.True(emptyBucket(t, b))
	})
	t.Run("map_groups error is a bad row", func(t *testing.T) {
		is := is.New(t)
		ds := data.MapGroups(data.Range(100), func(x int) int { return x % 10 }, func(_ context.Context, k int, xs []int) ([]int, error) {
			if k == 3 {
				return nil, errors.New("three")
			}
			return []int{len(xs)}, nil
		})
		_, err := data.Count(ctx, ds)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), "group 3: three"))
		var st data.Stats
		n, err := data.Count(ctx, ds, data.SkipBadRows(1), data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(n, int64(9))
		is.Equal(st.BadRows[0].Pos, data.Pos{Source: "map_groups", Row: 3})
	})
	t.Run("limit after failure", func(t *testing.T) {
		is := is.New(t)
		ds := data.Map(data.Range(100), func(_ context.Context, x int) (int, error) {
			if x == 3 {
				panic("early")
			}
			return x, nil
		}, data.Concurrency(1))
		_, err := data.Count(ctx, data.Limit(ds, 50))
		var pe *data.PanicError
		is.True(errors.As(err, &pe)) // not a short, complete-looking count
	})
}

// TestAllToAllCancel cancels runs in the middle of spilling and merging:
// the error is the context's, no goroutine is left (goleak in TestMain)
// and no spill file stays, in a bucket or in the temporary directory.
func TestAllToAllCancel(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	b := storage.NewMem()
	defer b.Close()
	for _, where := range []string{"bucket", "tempdir"} {
		for _, at := range []string{"collecting", "merging"} {
			t.Run(where+"/"+at, func(t *testing.T) {
				is := is.New(t)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				opts := []data.Option{data.MemoryBudget(data.MinMemoryBudget)}
				if where == "bucket" {
					opts = append(opts, data.SpillTo(b))
				}
				src := data.Map(data.Range(200_000), func(ctx context.Context, x int) (int, error) {
					if at == "collecting" && x == 150_000 {
						cancel()
					}
					return x, nil
				})
				n := 0
				var err error
				for _, e := range data.Rows(ctx, data.SortBy(src, func(x int) int { return -x }), opts...) {
					if e != nil {
						err = e
						break
					}
					n++
					if at == "merging" && n == 1000 {
						cancel()
					}
				}
				is.True(errors.Is(err, context.Canceled))
				is.True(emptyBucket(t, b))
				is.Equal(len(tempSpillDirs(t, tmp)), 0)
			})
		}
	}
}

// TestSplit deals rows to n consumers reading at once: every row once, in
// round robin, each shard the same as Shard gives alone; Equal drops the
// remainder; Skip resumes a shard.
func TestSplit(t *testing.T) {
	ctx := context.Background()
	const total = 10_007
	readAll := func(t *testing.T, s *data.Shards[int]) [][]int {
		out := make([][]int, s.N())
		var wg sync.WaitGroup
		for i := range s.N() {
			wg.Go(func() {
				for v, err := range s.Shard(i) {
					if err != nil {
						t.Errorf("shard %d: %v", i, err)
						return
					}
					out[i] = append(out[i], v)
				}
			})
		}
		wg.Wait()
		return out
	}
	ds := data.Map(data.Range(total, data.BlockRows(100)), square)
	for _, equal := range []bool{false, true} {
		t.Run(fmt.Sprint("equal=", equal), func(t *testing.T) {
			is := is.New(t)
			var opts []data.Option
			if equal {
				opts = append(opts, data.Equal())
			}
			s, err := data.Split(ctx, ds, 4, opts...)
			is.NoErr(err)
			shards := readAll(t, s)
			is.NoErr(s.Close())
			for i, sh := range shards {
				n := total / 4
				if !equal && i < total%4 {
					n++
				}
				is.Equal(len(sh), n)
				for k, v := range sh {
					x := k*4 + i
					is.Equal(v, x*x) // row k of shard i is row k*n+i
				}
				alone, err := data.Take(ctx, data.Shard(ds, 4, i, opts...), total)
				is.NoErr(err)
				is.Equal(alone, sh) // a shard is the same read alone
				resumed, err := data.Take(ctx, data.Skip(data.Shard(ds, 4, i, opts...), 1000), total)
				is.NoErr(err)
				is.Equal(resumed, sh[1000:]) // a restarted worker resumes at its position
			}
		})
	}
	t.Run("after a sort", func(t *testing.T) {
		is := is.New(t)
		sorted := data.SortBy(data.RandomShuffle(data.Range(1000), 1), func(x int) int { return x }, data.MemoryBudget(data.MinMemoryBudget))
		s, err := data.Split(ctx, sorted, 3, data.Equal())
		is.NoErr(err)
		shards := readAll(t, s)
		is.NoErr(s.Wait())
		is.Equal(shards[2][:3], []int{2, 5, 8})
		is.Equal(len(shards[0]), 333)
	})
	t.Run("slow consumer", func(t *testing.T) {
		// One consumer stalls: the dealing stops within the cap, so the
		// rows held stay bounded while the others have what was dealt.
		is := is.New(t)
		var st data.Stats
		s, err := data.Split(ctx, data.Range(1_000_000), 2, data.MaxRowsInFlight(1000), data.CollectStats(&st))
		is.NoErr(err)
		var wg sync.WaitGroup
		var fast int
		wg.Go(func() {
			for range s.Shard(0) {
				fast++
			}
		})
		time.Sleep(200 * time.Millisecond)
		next, stop := iter.Pull2(s.Shard(1))
		v, _, _ := next()
		is.Equal(v, 1)
		is.NoErr(s.Close()) // ends the run; both shards end
		stop()
		wg.Wait()
		is.True(fast < 10_000) // held back by the stalled consumer
		for _, o := range st.Operators {
			if o.Name == "split" {
				is.True(o.PeakRowsInFlight <= 1000)
			}
		}
	})
	t.Run("failure reaches every shard", func(t *testing.T) {
		is := is.New(t)
		ds := data.Map(data.Range(10_000), func(_ context.Context, x int) (int, error) {
			if x == 5000 {
				panic("in the middle")
			}
			return x, nil
		}, data.Concurrency(1))
		s, err := data.Split(ctx, ds, 3)
		is.NoErr(err)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				for _, err := range s.Shard(i) {
					if err != nil {
						errs[i] = err
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			var pe *data.PanicError
			is.True(errors.As(err, &pe)) // no shard ends as complete
		}
		is.True(s.Close() != nil)
	})
	t.Run("a consumer that breaks", func(t *testing.T) {
		is := is.New(t)
		s, err := data.Split(ctx, data.Range(100_000), 2, data.MaxRowsInFlight(100))
		is.NoErr(err)
		var wg sync.WaitGroup
		n := 0
		wg.Go(func() {
			for _, err := range s.Shard(0) {
				is.NoErr(err)
				n++
			}
		})
		for v := range s.Shard(1) {
			if v > 100 {
				break // the rest of shard 1 is dropped; shard 0 goes on
			}
		}
		wg.Wait()
		is.Equal(n, 50_000)
		is.NoErr(s.Wait())
		for _, err := range s.Shard(1) {
			is.True(strings.Contains(err.Error(), "already being read"))
		}
	})
}
