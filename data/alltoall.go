package data

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/goray-dev/goray/backend"
)

// badArg is the error of an all-to-all operator given bad input (a nil
// function, a count out of range): coded InvalidArgument, naming the
// function, what was wrong and what is valid.
func badArg(format string, args ...any) error {
	return backend.Errorf(backend.InvalidArgument, "", "data."+format, args...)
}

// failed is a dataset whose runs fail at start with err.
func failed[T any](err error) *Dataset[T] {
	return &Dataset[T]{start: func(*run) (stream[T], error) { return stream[T]{}, err }}
}

// rowOut writes an all-to-all operator's output rows; each is positioned
// by its index in the operator's output (Source is the operator's name).
type rowOut[O any] struct {
	w   *blockWriter[O]
	src string
	n   int64
}

func (o *rowOut[O]) put(v O) error {
	p := Pos{Source: o.src, Row: o.n}
	o.n++
	return o.w.put(v, p)
}

// startAllToAll registers an all-to-all operator and starts its goroutine:
// body reads the operator's inputs (started by the caller) and writes its
// rows to out, under the operator's in-flight caps.
func startAllToAll[O any](r *run, name string, opts []Option, body func(o *opState, cfg *config, area *spillArea, out *rowOut[O]) error) (stream[O], error) {
	o, cfg := r.op(name, opts)
	if err := cfg.err(); err != nil {
		return stream[O]{}, fmt.Errorf("operator %s: %w", o.name, err)
	}
	o.mem = &memStats{budget: cfg.memBudget}
	area := newSpillArea(r, o, cfg)
	ch := make(chan block[O], 2)
	w := &blockWriter[O]{ctx: r.ctx, r: r, o: o, size: int(min(int64(cfg.blockRows), cfg.maxRows)), out: ch}
	r.g.Go(func() error {
		defer close(ch)
		defer o.finish()
		if err := recovered(o.name, func() error { return body(o, cfg, area, &rowOut[O]{w: w, src: o.name}) }); err != nil {
			return err
		}
		return w.flush()
	})
	return stream[O]{ch: ch, op: o}, nil
}

// eachRow calls f with every row of in, releasing each block from the
// upstream operator once f has seen its rows.
func eachRow[I any](ctx context.Context, o *opState, in stream[I], f func(I) error) error {
	for {
		b, ok, err := recv(ctx, in.ch)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		o.rowsIn.Add(int64(len(b.rows)))
		for _, row := range b.rows {
			if err := f(row); err != nil {
				in.op.release(b.w)
				return err
			}
		}
		in.op.release(b.w)
	}
}

// drainSource pulls every row of src into put, then closes src.
func drainSource[E any](src source[E], put func(E) error) error {
	for {
		e, ok, err := src.next()
		if err == nil && ok {
			err = put(e)
		}
		if err != nil {
			src.close()
			return err
		}
		if !ok {
			return src.close()
		}
	}
}

// keyed is a row with a key computed once (SortBy, GroupBy, Join) or a
// random one (RandomShuffle). Its fields are exported for encoding/gob.
type keyed[K, V any] struct {
	K K
	V V
}

func byKey[K cmp.Ordered, V any](desc bool) func(a, b keyed[K, V]) int {
	if desc {
		return func(a, b keyed[K, V]) int { return cmp.Compare(b.K, a.K) }
	}
	return func(a, b keyed[K, V]) int { return cmp.Compare(a.K, b.K) }
}

// Descending makes [Sort], [SortBy], [GroupBy] and [MapGroups] order
// from the largest key down (for Sort, cmp reversed). Equal keys keep
// their input order either way. It does nothing elsewhere.
func Descending() Option { return optionFunc(func(c *config) { c.descending = true }) }

// Sort adds an operator that sorts d's rows by cmp (negative when a comes
// before b, as for slices.SortFunc), like Ray Data's Dataset.sort. The
// sort is stable: rows that compare equal keep their input order, so in
// an ordered run the output is the same every time. Options:
// [Descending], [MemoryBudget], [SpillTo], [MaxRowsInFlight], [Name].
//
// Sort reads its whole input before it hands on the first row. It holds
// rows up to its [MemoryBudget] (256 MiB by default); past it, it sorts
// what it holds and spills it as a run to files (a temporary directory,
// or the bucket of [SpillTo]), then merges the runs: an external merge
// sort, whose memory stays within the budget whatever the data's size.
//
// Spill files are written with encoding/gob, one stream per file, so the
// row type is described once per file and numbers are written in binary
// (floats bit for bit, NaN included). gob, like every encoding package,
// drops unexported struct fields; a row type with any (or with func or
// chan fields) is refused with an error naming the field when the rows
// first need to be spilled, unless it implements encoding.BinaryMarshaler
// or gob.GobEncoder. gob also flattens pointers: a nil pointer in a field
// and a pointer to a zero value both read back as nil, and nil and empty
// slices and maps read back as nil. Rows that fit the budget are never
// encoded.
//
// A panic in cmp fails the run with a [*PanicError]. Output rows are
// positioned (in a [RowError] of a later operator) by their index in the
// sorted output.
func Sort[T any](d *Dataset[T], cmp func(a, b T) int, opts ...Option) *Dataset[T] {
	if d == nil || cmp == nil {
		return failed[T](badArg("Sort: %s is nil; pass a dataset and a func(a, b T) int such as cmp.Compare", nilName(d == nil, "dataset", "cmp")))
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[T]{}, err
		}
		return startAllToAll(r, "sort", opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[T]) error {
			c := cmp
			if cfg.descending {
				c = func(a, b T) int { return cmp(b, a) }
			}
			s := newExtSorter(r.ctx, o, area, cfg.memBudget, c)
			if err := eachRow(r.ctx, o, in, s.add); err != nil {
				return err
			}
			src, err := s.sorted()
			if err != nil {
				return err
			}
			return drainSource(src, out.put)
		})
	}}
}

func nilName(first bool, a, b string) string {
	if first {
		return a
	}
	return b
}

// SortBy adds an operator that sorts d's rows by key, smallest first (see
// [Descending]), like Ray Data's Dataset.sort(key). key is called once per
// row, and its result is spilled with the row when the rows pass the
// [MemoryBudget]. Floating-point keys order as cmp.Compare does: NaN
// first. Otherwise as [Sort].
func SortBy[T any, K cmp.Ordered](d *Dataset[T], key func(T) K, opts ...Option) *Dataset[T] {
	if d == nil || key == nil {
		return failed[T](badArg("SortBy: %s is nil; pass a dataset and a func(T) K giving each row's key", nilName(d == nil, "dataset", "key")))
	}
	return sortKeyed(d, "sort", opts, func(cfg *config) (func(T) K, bool) { return key, cfg.descending })
}

// sortKeyed is the operator of SortBy and RandomShuffle: rows sorted by a
// key computed once per row, spilled with it. keyOf gives a run its key
// function (fresh state per run) and the direction.
func sortKeyed[T any, K cmp.Ordered](d *Dataset[T], name string, opts []Option, keyOf func(cfg *config) (func(T) K, bool)) *Dataset[T] {
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[T]{}, err
		}
		return startAllToAll(r, name, opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[T]) error {
			key, desc := keyOf(cfg)
			s := newKeyedSorter[K, T](r.ctx, o, area, cfg.memBudget, desc)
			if err := eachRow(r.ctx, o, in, func(row T) error { return s.add(keyed[K, T]{key(row), row}) }); err != nil {
				return err
			}
			src, err := s.sorted()
			if err != nil {
				return err
			}
			return drainSource(src, func(e keyed[K, T]) error { return out.put(e.V) })
		})
	}}
}

// RandomShuffle adds an operator that puts d's rows in a random order,
// like Ray Data's Dataset.random_shuffle(seed). The order is a function
// of seed and the input order: in an ordered run, the same seed gives the
// same order every time (use a new seed per epoch, or a random one, for a
// new order). Each row draws a random 64-bit key (PCG seeded with seed),
// and the rows are sorted by it, so memory and spilling are as for
// [Sort]. Options: [MemoryBudget], [SpillTo], [MaxRowsInFlight], [Name].
func RandomShuffle[T any](d *Dataset[T], seed uint64, opts ...Option) *Dataset[T] {
	if d == nil {
		return failed[T](badArg("RandomShuffle: dataset is nil"))
	}
	return sortKeyed(d, "random_shuffle", opts, func(*config) (func(T) uint64, bool) {
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		return func(T) uint64 { return rng.Uint64() }, false
	})
}

// Repartition adds an operator that regroups d's rows, in order, into n
// blocks of equal size (the first total mod n blocks have one row more),
// like Ray Data's Dataset.repartition(num_blocks) without shuffle. Blocks
// are the units the next operator processes in parallel ([MapBatches]
// without [BatchSize] gets one block per call), so n sets the parallelism
// of what follows. It reads its whole input first (to count it), holding
// it within [MemoryBudget] and spilling the rest. A block is at most
// [MaxRowsInFlight] rows of this operator; a larger one is handed on in
// pieces of that size (raise the cap for larger blocks). When the input
// has fewer than n rows, there are as many blocks as rows. n must be at
// least 1.
func Repartition[T any](d *Dataset[T], n int, opts ...Option) *Dataset[T] {
	if d == nil {
		return failed[T](badArg("Repartition: dataset is nil"))
	}
	if n < 1 {
		return failed[T](badArg("Repartition(%d): the number of blocks must be at least 1", n))
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[T]{}, err
		}
		return startAllToAll(r, "repartition", opts, func(o *opState, cfg *config, area *spillArea, out *rowOut[T]) error {
			s := newExtSorter[T](r.ctx, o, area, cfg.memBudget, nil)
			if err := eachRow(r.ctx, o, in, s.add); err != nil {
				return err
			}
			total := s.n
			src, err := s.sorted()
			if err != nil {
				return err
			}
			var i, inBlock, size int64
			return drainSource(src, func(row T) error {
				if inBlock == size { // a new block
					if err := out.w.flush(); err != nil {
						return err
					}
					size = total / int64(n)
					if i < total%int64(n) {
						size++
					}
					out.w.size = int(min(size, cfg.maxRows))
					inBlock = 0
					i++
				}
				inBlock++
				return out.put(row)
			})
		})
	}}
}

// Limit adds an operator that passes on the first n rows of d (in an
// unordered run, any n rows) and then stops: once it has them, the
// operators and sources before it are stopped, and the run goes on with
// what follows. Like Ray Data's Dataset.limit. Rows keep their positions.
// n must be 0 or more.
func Limit[T any](d *Dataset[T], n int64, opts ...Option) *Dataset[T] {
	if d == nil {
		return failed[T](badArg("Limit: dataset is nil"))
	}
	if n < 0 {
		return failed[T](badArg("Limit(%d): n must be 0 or more", n))
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		sub := r.sub()
		in, err := d.start(sub)
		if err != nil {
			sub.cancel()
			sub.g.Wait()
			return stream[T]{}, err
		}
		o, cfg := r.op("limit", opts)
		if err := cfg.err(); err != nil {
			sub.cancel()
			sub.g.Wait()
			return stream[T]{}, fmt.Errorf("operator %s: %w", o.name, err)
		}
		ch := make(chan block[T], 2)
		r.g.Go(func() error {
			defer close(ch)
			defer o.finish()
			left := n
			err := func() error {
				for left > 0 {
					b, ok, err := recv(sub.ctx, in.ch)
					if err != nil || !ok {
						return err
					}
					up := b.w
					if int64(len(b.rows)) > left {
						b, _ = cut(b, int(left))
					}
					left -= int64(len(b.rows))
					if err := pass(r.ctx, o, in.op, up, b, ch); err != nil {
						return err
					}
				}
				return nil
			}()
			reached := left == 0
			sub.cancel() // stops the upstream, which has nothing more to give
			werr := sub.g.Wait()
			if cerr := r.ctx.Err(); cerr != nil {
				return cerr
			}
			if werr != nil && !(reached && sub.ctx.Err() != nil && isContextErr(werr)) {
				return werr
			}
			if err != nil && !(reached && isContextErr(err)) {
				return err
			}
			return nil
		})
		return stream[T]{ch: ch, op: o}, nil
	}}
}

func isContextErr(err error) bool {
	c := backend.CodeOf(err)
	return c == backend.Canceled || c == backend.DeadlineExceeded
}

// pass hands block b on from upstream operator up (which holds weight w
// for it) through operator o: o admits it under its caps, then up lets it
// go.
func pass[T any](ctx context.Context, o *opState, up *opState, w weight, b block[T], out chan<- block[T]) error {
	if len(b.rows) == 0 {
		up.release(w)
		return nil
	}
	aw, err := admit(ctx, o, b.rows, weight{})
	if err != nil {
		up.release(w)
		return err
	}
	up.release(w)
	o.rowsIn.Add(int64(len(b.rows)))
	o.rowsOut.Add(int64(len(b.rows)))
	b.w = aw
	return send(ctx, out, b)
}

// Skip adds an operator that drops the first n rows of d and passes on
// the rest, keeping their positions. With [Shard] it resumes a shard where
// a restarted consumer left off. n must be 0 or more.
func Skip[T any](d *Dataset[T], n int64, opts ...Option) *Dataset[T] {
	if d == nil {
		return failed[T](badArg("Skip: dataset is nil"))
	}
	if n < 0 {
		return failed[T](badArg("Skip(%d): n must be 0 or more", n))
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[T]{}, err
		}
		o, cfg := r.op("skip", opts)
		if err := cfg.err(); err != nil {
			return stream[T]{}, fmt.Errorf("operator %s: %w", o.name, err)
		}
		ch := make(chan block[T], 2)
		r.g.Go(func() error {
			defer close(ch)
			defer o.finish()
			left := n
			for {
				b, ok, err := recv(r.ctx, in.ch)
				if err != nil || !ok {
					return err
				}
				up := b.w
				if left > 0 {
					k := min(left, int64(len(b.rows)))
					_, b = cut(b, int(k))
					left -= k
				}
				if err := pass(r.ctx, o, in.op, up, b, ch); err != nil {
					return err
				}
			}
		})
		return stream[T]{ch: ch, op: o}, nil
	}}
}

// Union is the rows of every dataset of ds, one dataset after the other:
// all of ds[0]'s rows in order, then ds[1]'s, and so on, like Ray Data's
// Dataset.union. The datasets run at once (each within its own caps), so
// the next one is ready when the one before ends. In an unordered run,
// rows are handed on as they come from any of them. Rows keep their
// positions. ds must hold at least one dataset, and no nil one.
func Union[T any](ds ...*Dataset[T]) *Dataset[T] {
	if len(ds) == 0 {
		return failed[T](badArg("Union: no datasets; pass at least one"))
	}
	for i, d := range ds {
		if d == nil {
			return failed[T](badArg("Union: dataset %d of %d is nil", i, len(ds)))
		}
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		ins := make([]stream[T], len(ds))
		for i, d := range ds {
			in, err := d.start(r)
			if err != nil {
				return stream[T]{}, err
			}
			ins[i] = in
		}
		o, cfg := r.op("union", nil)
		ch := make(chan block[T], 2)
		forward := func(in stream[T]) error {
			for {
				b, ok, err := recv(r.ctx, in.ch)
				if err != nil || !ok {
					return err
				}
				if err := pass(r.ctx, o, in.op, b.w, b, ch); err != nil {
					return err
				}
			}
		}
		if !cfg.unordered {
			r.g.Go(func() error {
				defer close(ch)
				defer o.finish()
				for _, in := range ins {
					if err := forward(in); err != nil {
						return err
					}
				}
				return nil
			})
			return stream[T]{ch: ch, op: o}, nil
		}
		done := make(chan struct{}, len(ins))
		for _, in := range ins {
			r.g.Go(func() error {
				defer func() { done <- struct{}{} }()
				return forward(in)
			})
		}
		r.g.Go(func() error {
			for range ins {
				<-done
			}
			o.finish()
			close(ch)
			return nil
		})
		return stream[T]{ch: ch, op: o}, nil
	}}
}
