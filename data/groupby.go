package data

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"unsafe"
)

// Agg is an aggregation of the rows of a group into a value of type R,
// through a state of type A, like Ray Data's AggregateFn: Init makes the
// state of an empty group, Add adds a row to a state, Merge combines two
// states of the same group (partial states built apart, before and after
// a spill), and Result turns the final state into the group's value.
// Add and Merge may modify and return their first argument. States cross
// spill files with encoding/gob when a [GroupBy] passes its
// [MemoryBudget], so A must be a type gob encodes faithfully (see [Sort]).
//
// [CountOf], [SumOf], [MinOf], [MaxOf] and [MeanOf] are built in; any other is a
// value of this type (see the GroupBy example, which counts and averages
// at once). Init may be nil (the zero A); Add, Merge and Result may not.
type Agg[T, A, R any] struct {
	Init   func() A
	Add    func(state A, row T) A
	Merge  func(a, b A) A
	Result func(state A) R
}

func (a Agg[T, A, R]) check(fn string) error {
	switch {
	case a.Add == nil:
		return badArg("%s: the aggregation's Add is nil; an Agg needs Add, Merge and Result (Init may be nil)", fn)
	case a.Merge == nil:
		return badArg("%s: the aggregation's Merge is nil; an Agg needs Add, Merge and Result (Init may be nil)", fn)
	case a.Result == nil:
		return badArg("%s: the aggregation's Result is nil; an Agg needs Add, Merge and Result (Init may be nil)", fn)
	}
	return nil
}

func (a Agg[T, A, R]) init() A {
	if a.Init == nil {
		var zero A
		return zero
	}
	return a.Init()
}

// Number is the constraint of [SumOf] and [MeanOf]: Go's integer and
// floating-point types.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// CountOf counts a group's rows (Ray's Count()).
func CountOf[T any]() Agg[T, int64, int64] {
	return Agg[T, int64, int64]{
		Add:    func(n int64, _ T) int64 { return n + 1 },
		Merge:  func(a, b int64) int64 { return a + b },
		Result: func(n int64) int64 { return n },
	}
}

// SumOf adds up f over a group's rows (Ray's Sum(on)), in N: integer sums
// wrap as Go's integers do.
func SumOf[T any, N Number](f func(T) N) Agg[T, N, N] {
	return Agg[T, N, N]{
		Add:    func(s N, row T) N { return s + f(row) },
		Merge:  func(a, b N) N { return a + b },
		Result: func(s N) N { return s },
	}
}

// Extreme is the state of [MinOf] and [MaxOf]: the extreme so far, and whether
// there is one.
type Extreme[V any] struct {
	V   V
	Set bool
}

func extreme[T any, V cmp.Ordered](f func(T) V, better func(a, b V) bool) Agg[T, Extreme[V], V] {
	pick := func(a, b Extreme[V]) Extreme[V] {
		if !a.Set || (b.Set && better(b.V, a.V)) {
			return b
		}
		return a
	}
	return Agg[T, Extreme[V], V]{
		Add:    func(s Extreme[V], row T) Extreme[V] { return pick(s, Extreme[V]{f(row), true}) },
		Merge:  pick,
		Result: func(s Extreme[V]) V { return s.V },
	}
}

// MinOf is the smallest f over a group's rows (Ray's Min(on)), as cmp.Less
// orders (a NaN is smaller than any number).
func MinOf[T any, V cmp.Ordered](f func(T) V) Agg[T, Extreme[V], V] {
	return extreme(f, cmp.Less[V])
}

// MaxOf is the largest f over a group's rows (Ray's Max(on)).
func MaxOf[T any, V cmp.Ordered](f func(T) V) Agg[T, Extreme[V], V] {
	return extreme(f, func(a, b V) bool { return cmp.Less(b, a) })
}

// MeanState is the state of [MeanOf]: a sum and a count.
type MeanState struct {
	Sum float64
	N   int64
}

// MeanOf is the average of f over a group's rows (Ray's Mean(on)), summed in
// float64.
func MeanOf[T any, N Number](f func(T) N) Agg[T, MeanState, float64] {
	return Agg[T, MeanState, float64]{
		Add:    func(s MeanState, row T) MeanState { return MeanState{s.Sum + float64(f(row)), s.N + 1} },
		Merge:  func(a, b MeanState) MeanState { return MeanState{a.Sum + b.Sum, a.N + b.N} },
		Result: func(s MeanState) float64 { return s.Sum / float64(s.N) },
	}
}

// Group is one group of a [GroupBy]: its key and its aggregate.
type Group[K, V any] struct {
	Key   K
	Value V
}

// mapEntryBytes is the estimated cost of a map entry beyond its key and
// value (bucket slot, tophash, overflow).
const mapEntryBytes = 16

// GroupBy adds an operator that groups d's rows by key and aggregates
// each group with agg, giving one [Group] per distinct key, ordered by key
// (smallest first; see [Descending]), like Ray Data's
// Dataset.groupby(key).aggregate(agg): data.GroupBy(d, key, data.CountOf[T]())
// is groupby(key).count(); [SumOf], [MinOf], [MaxOf] and [MeanOf] are
// sum, min, max and mean, and any [Agg] is a user-defined aggregation.
//
// Rows are aggregated as they come into a map of states, one per key,
// which holds up to [MemoryBudget] (estimated); past it the states are
// sorted by key and spilled as a run, and the map starts again. At the
// end the runs are merged by key, and the states of one key combined with
// Merge: memory stays within the budget however many groups there are,
// and few groups never spill. Keys and states are spilled with
// encoding/gob (see [Sort]). A panic in key or agg's functions fails the
// run with a [*PanicError]. Options: [Descending], [MemoryBudget],
// [SpillTo], [MaxRowsInFlight], [Name].
func GroupBy[T any, K cmp.Ordered, A, R any](d *Dataset[T], key func(T) K, agg Agg[T, A, R], opts ...Option) *Dataset[Group[K, R]] {
	switch {
	case d == nil:
		return failed[Group[K, R]](badArg("GroupBy: dataset is nil"))
	case key == nil:
		return failed[Group[K, R]](badArg("GroupBy: key is nil; pass a func(T) K giving each row's group"))
	}
	if err := agg.check("GroupBy"); err != nil {
		return failed[Group[K, R]](err)
	}
	return &Dataset[Group[K, R]]{start: func(r *run) (stream[Group[K, R]], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[Group[K, R]]{}, err
		}
		return startAllToAll(r, "group_by", opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[Group[K, R]]) error {
			s := newKeyedSorter[K, A](r.ctx, o, area, cfg.memBudget, cfg.descending)
			sizeK, sizeA := newSizer[K](), newSizer[A]()
			flatA := sizeA.flat > 0
			// The states: index maps each key to its state in vals, so
			// a row costs one map lookup.
			index := newGroupIndex[K]()
			var vals []keyed[K, A]
			var held int64
			spill := func() error {
				entries := vals
				slices.SortFunc(entries, s.cmp) // keys are distinct: stable or not is the same
				index, vals = newGroupIndex[K](), nil
				err := s.spillSorted(entries, held)
				held = 0
				return err
			}
			if err := eachRow(r.ctx, o, in, func(row T) error {
				k := key(row)
				i, ok := index.get(k)
				if !ok {
					a := agg.init()
					// The key is held twice (map and vals; a string's
					// bytes once), with the index.
					sz := sizeK.val(k) + sizeA.val(a) + mapEntryBytes + int64(unsafe.Sizeof(k)) + 8
					if held > 0 && held+sz > cfg.memBudget {
						if err := spill(); err != nil {
							return err
						}
					}
					held += sz
					o.mem.hold(1, sz)
					i = len(vals)
					index.put(k, i)
					vals = append(vals, keyed[K, A]{k, a})
				}
				st := &vals[i].V
				if flatA {
					*st = agg.Add(*st, row)
					return nil
				}
				before := sizeA.val(*st)
				a := agg.Add(*st, row)
				*st = a
				if d := sizeA.val(a) - before; d != 0 {
					held += d
					o.mem.hold(0, d)
				}
				return nil
			}); err != nil {
				return err
			}
			// What the map holds becomes the sorter's rows in memory.
			entries := make([]ranked[keyed[K, A]], 0, len(vals))
			for i, e := range vals {
				entries = append(entries, ranked[keyed[K, A]]{e, int64(i)})
			}
			index, vals = nil, nil
			s.buf, s.bufBytes = entries, held
			src, err := s.sorted()
			if err != nil {
				return err
			}
			var cur keyed[K, A]
			have := false
			if err := drainSource(src, func(e keyed[K, A]) error {
				if have && cur.K == e.K {
					cur.V = agg.Merge(cur.V, e.V)
					return nil
				}
				if have {
					if err := out.put(Group[K, R]{cur.K, agg.Result(cur.V)}); err != nil {
						return err
					}
				}
				cur, have = e, true
				return nil
			}); err != nil {
				return err
			}
			if have {
				return out.put(Group[K, R]{cur.K, agg.Result(cur.V)})
			}
			return nil
		})
	}}
}

// MapGroups adds an operator that groups d's rows by key and calls fn
// once per group with the key and the group's rows (in input order),
// handing on the rows fn returns; groups come in key order (see
// [Descending]), like Ray Data's Dataset.groupby(key).map_groups(fn). The
// rows are sorted by key as by [SortBy], within [MemoryBudget] and
// spilling beyond it, and each group is then held whole while fn runs: a
// group larger than the budget is held anyway. An error from fn makes
// the group a bad row (see [SkipBadRows]) positioned by the group's index
// in key order; a panic fails the run with a [*PanicError]. Options:
// [Descending], [MemoryBudget], [SpillTo], [MaxRowsInFlight], [Name].
func MapGroups[T any, K cmp.Ordered, O any](d *Dataset[T], key func(T) K, fn func(ctx context.Context, key K, rows []T) ([]O, error), opts ...Option) *Dataset[O] {
	switch {
	case d == nil:
		return failed[O](badArg("MapGroups: dataset is nil"))
	case key == nil:
		return failed[O](badArg("MapGroups: key is nil; pass a func(T) K giving each row's group"))
	case fn == nil:
		return failed[O](badArg("MapGroups: fn is nil; pass a func(ctx, K, []T) ([]O, error)"))
	}
	return &Dataset[O]{start: func(r *run) (stream[O], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[O]{}, err
		}
		return startAllToAll(r, "map_groups", opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[O]) error {
			s := newKeyedSorter[K, T](r.ctx, o, area, cfg.memBudget, cfg.descending)
			if err := eachRow(r.ctx, o, in, func(row T) error { return s.add(keyed[K, T]{key(row), row}) }); err != nil {
				return err
			}
			src, err := s.sorted()
			if err != nil {
				return err
			}
			size := newSizer[T]()
			var group []T
			var gk K
			var gbytes, index int64
			flush := func() error {
				if len(group) == 0 {
					return nil
				}
				res, err := fn(r.ctx, gk, group)
				o.mem.free(int64(len(group)), gbytes)
				clear(group)
				group, gbytes = group[:0], 0
				idx := index
				index++
				if cerr := r.ctx.Err(); cerr != nil {
					return cerr
				}
				if err != nil {
					o.bad.Add(1)
					return r.bad.add(&RowError{Op: o.name, Pos: Pos{Source: o.name, Row: idx}, Err: fmt.Errorf("group %v: %w", gk, err)})
				}
				for _, v := range res {
					if err := out.put(v); err != nil {
						return err
					}
				}
				return nil
			}
			if err := drainSource(src, func(e keyed[K, T]) error {
				if len(group) > 0 && e.K != gk {
					if err := flush(); err != nil {
						return err
					}
				}
				gk = e.K
				sz := size.val(e.V)
				group = append(group, e.V)
				gbytes += sz
				o.mem.hold(1, sz)
				return nil
			}); err != nil {
				return err
			}
			return flush()
		})
	}}
}

// Joined is a row of a join: a left row and a right row with the same
// key. In a [LeftJoin], a left row without a match comes once with Matched
// false and Right the zero R; in a [Join], Matched is always true.
type Joined[L, R any] struct {
	Left    L
	Right   R
	Matched bool
}

// Join adds an operator that joins left and right on their keys (an inner
// join): one [Joined] row for each pair of a left and a right row with
// equal keys, like Ray Data's Dataset.join(join_type="inner"). See
// [LeftJoin] for how it runs.
func Join[L, R any, K cmp.Ordered](left *Dataset[L], right *Dataset[R], lkey func(L) K, rkey func(R) K, opts ...Option) *Dataset[Joined[L, R]] {
	return join(left, right, lkey, rkey, false, "Join", opts)
}

// LeftJoin is [Join] that also keeps the left rows without a match (Ray's
// join_type="left_outer"): each comes once, with Matched false.
//
// A join is a sort-merge join: both sides are sorted by key as by
// [SortBy], each within half of [MemoryBudget] and spilling beyond it,
// then merged. The output is in key order; among rows of one key, left
// rows in their input order, and for each the right rows in theirs, so an
// ordered run gives the same output every time. The right rows of one key
// are held together while they are paired (a key with more right rows
// than the budget holds is held anyway). Both datasets run at once, each
// within its own caps. Options: [MemoryBudget], [SpillTo],
// [MaxRowsInFlight], [Name].
func LeftJoin[L, R any, K cmp.Ordered](left *Dataset[L], right *Dataset[R], lkey func(L) K, rkey func(R) K, opts ...Option) *Dataset[Joined[L, R]] {
	return join(left, right, lkey, rkey, true, "LeftJoin", opts)
}

func join[L, R any, K cmp.Ordered](left *Dataset[L], right *Dataset[R], lkey func(L) K, rkey func(R) K, outer bool, fn string, opts []Option) *Dataset[Joined[L, R]] {
	switch {
	case left == nil || right == nil:
		return failed[Joined[L, R]](badArg("%s: %s dataset is nil", fn, nilName(left == nil, "the left", "the right")))
	case lkey == nil || rkey == nil:
		return failed[Joined[L, R]](badArg("%s: %s is nil; pass a func giving each row's join key", fn, nilName(lkey == nil, "lkey", "rkey")))
	}
	name := "join"
	if outer {
		name = "left_join"
	}
	return &Dataset[Joined[L, R]]{start: func(r *run) (stream[Joined[L, R]], error) {
		lin, err := left.start(r)
		if err != nil {
			return stream[Joined[L, R]]{}, err
		}
		rin, err := right.start(r)
		if err != nil {
			return stream[Joined[L, R]]{}, err
		}
		return startAllToAll(r, name, opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[Joined[L, R]]) error {
			half := max(cfg.memBudget/2, MinMemoryBudget/2)
			rs := newExtSorter(r.ctx, o, area, half, byKey[K, R](false))
			ls := newExtSorter(r.ctx, o, area, half, byKey[K, L](false))
			if err := eachRow(r.ctx, o, rin, func(row R) error { return rs.add(keyed[K, R]{rkey(row), row}) }); err != nil {
				return err
			}
			if err := eachRow(r.ctx, o, lin, func(row L) error { return ls.add(keyed[K, L]{lkey(row), row}) }); err != nil {
				return err
			}
			rsrc, err := rs.sorted()
			if err != nil {
				return err
			}
			defer rsrc.close()
			lsrc, err := ls.sorted()
			if err != nil {
				return err
			}
			defer lsrc.close()
			size := newSizer[R]()
			var group []R // the right rows of key gk
			var gk K
			var gbytes int64
			nextR, okR, err := rsrc.next()
			if err != nil {
				return err
			}
			// fill makes group the right rows of key k, if any.
			fill := func(k K) error {
				if len(group) > 0 && gk == k {
					return nil
				}
				o.mem.free(int64(len(group)), gbytes)
				clear(group)
				group, gbytes = group[:0], 0
				for okR && cmp.Compare(nextR.K, k) < 0 {
					if nextR, okR, err = rsrc.next(); err != nil {
						return err
					}
				}
				for okR && nextR.K == k {
					sz := size.val(nextR.V)
					group = append(group, nextR.V)
					gbytes += sz
					o.mem.hold(1, sz)
					if nextR, okR, err = rsrc.next(); err != nil {
						return err
					}
				}
				gk = k
				return nil
			}
			defer func() { o.mem.free(int64(len(group)), gbytes) }()
			for {
				l, ok, err := lsrc.next()
				if err != nil {
					return err
				}
				if !ok {
					return nil
				}
				if err := fill(l.K); err != nil {
					return err
				}
				if len(group) == 0 {
					if outer {
						if err := out.put(Joined[L, R]{Left: l.V}); err != nil {
							return err
						}
					}
					continue
				}
				for _, rv := range group {
					if err := out.put(Joined[L, R]{Left: l.V, Right: rv, Matched: true}); err != nil {
						return err
					}
				}
			}
		})
	}}
}
