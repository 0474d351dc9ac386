package data

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Dataset is a lazy, typed plan of rows of type T: a source and the
// operators applied to it. Nothing runs until a sink ([Rows], [Take],
// [Count], [WriteJSONL], ...) runs it; each sink call is a new run.
//
// Build datasets with the source functions ([FromItems], [Range],
// [ReadJSONL], ...) and the operator functions ([Map], [Filter],
// [MapBatches], ...); the zero value is not usable. A *Dataset is immutable
// and safe for concurrent use: several runs of one dataset may go at once.
type Dataset[T any] struct {
	start func(r *run) (stream[T], error)
	// stage, for operators that can run fused with the driver-side
	// operators after them, registers the operator (and those before it
	// in its stage) without starting it; start is stage and stage.start.
	stage func(r *run) (*stage[T], error)
}

// partition is a piece of a source that one goroutine reads in order,
// calling w.put for each row and w.bad for each row it cannot decode.
type partition[T any] struct {
	name string
	read func(ctx context.Context, w *blockWriter[T]) error
}

// sourceOf makes a dataset whose rows come from the partitions that list
// returns when the run starts. Partitions are read one after the other,
// or, in an unordered run, up to parallel at once.
func sourceOf[T any](name string, opts []Option, parallel int, list func(ctx context.Context, r *run) ([]partition[T], error)) *Dataset[T] {
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		o, cfg := r.op(name, opts)
		if err := cfg.err(); err != nil {
			return stream[T]{}, fmt.Errorf("source %s: %w", o.name, err)
		}
		parts, err := list(r.ctx, r)
		if err != nil {
			return stream[T]{}, err
		}
		// Blocks in the buffer hold their rows on the source's caps, so
		// the buffer reads no further ahead than the caps allow.
		out := make(chan block[T], 2)
		// A local copy: runs of the dataset may start at once.
		parallel := parallel
		if !cfg.unordered {
			parallel = 1
		}
		parallel = max(1, min(parallel, len(parts)))
		var next atomic.Int64
		var left atomic.Int64
		left.Store(int64(parallel))
		for range parallel {
			r.g.Go(func() error {
				defer func() {
					if left.Add(-1) == 0 {
						o.finish()
						close(out)
					}
				}()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(parts) {
						return nil
					}
					w := &blockWriter[T]{ctx: r.ctx, r: r, o: o, size: int(min(int64(cfg.blockRows), cfg.maxRows)), maxLine: cfg.maxLine, maxFile: cfg.maxFile, out: out}
					if err := recovered("source "+o.name, func() error { return parts[i].read(r.ctx, w) }); err != nil {
						return err
					}
					if err := w.flush(); err != nil {
						return err
					}
				}
			})
		}
		return stream[T]{ch: out, op: o}, nil
	}}
}

// blockWriter gathers a partition's rows into blocks, admitting each block
// under the source's caps before it fills it, so a source never reads
// ahead of what its consumer has room for.
type blockWriter[T any] struct {
	ctx     context.Context
	r       *run
	o       *opState
	size    int
	maxLine int   // MaxLineBytes, for text sources
	maxFile int64 // MaxFileBytes, for ReadBinaryFiles
	out     chan<- block[T]
	cur     block[T]
}

// newRows is an empty slice with room for a block: an array the sink gave
// back when the run has a pool, else a new one.
func (w *blockWriter[T]) newRows() []T {
	if w.r != nil && w.r.rows != nil {
		if rows, ok := w.r.rows.get().([]T); ok && cap(rows) >= w.size {
			return rows[:0:w.size] // room for one block, as a new one has
		}
	}
	return make([]T, 0, w.size)
}

func (w *blockWriter[T]) put(row T, p Pos) error {
	if len(w.cur.rows) == 0 {
		n, err := w.o.acquireRows(w.ctx, w.size, 0)
		if err != nil {
			return err
		}
		w.cur = block[T]{rows: w.newRows(), w: weight{rows: n}}
	}
	w.cur.rows = append(w.cur.rows, row)
	w.cur.pos.add(p)
	if len(w.cur.rows) == w.size {
		return w.flush()
	}
	return nil
}

// putRun adds rows from consecutive positions starting at p (rows p.Row,
// p.Row+1, ... of one source), a block at a time.
func (w *blockWriter[T]) putRun(rows []T, p Pos) error {
	for len(rows) > 0 {
		if len(w.cur.rows) == 0 {
			n, err := w.o.acquireRows(w.ctx, w.size, 0)
			if err != nil {
				return err
			}
			w.cur = block[T]{rows: w.newRows(), w: weight{rows: n}}
		}
		k := min(len(rows), w.size-len(w.cur.rows))
		w.cur.rows = append(w.cur.rows, rows[:k]...)
		w.cur.pos.runs = append(w.cur.pos.runs, posRun{start: w.cur.pos.n, n: k, p: p})
		w.cur.pos.n += k
		rows = rows[k:]
		p.Row += int64(k)
		if len(w.cur.rows) == w.size {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// putFill adds n rows from consecutive positions starting at p, a block
// at a time, that fill writes into the block: fill(dst, k) sets dst to
// rows k, k+1, ... of the n.
func (w *blockWriter[T]) putFill(n int, p Pos, fill func(dst []T, k int)) error {
	for k := 0; k < n; {
		if len(w.cur.rows) == 0 {
			a, err := w.o.acquireRows(w.ctx, w.size, 0)
			if err != nil {
				return err
			}
			w.cur = block[T]{rows: w.newRows(), w: weight{rows: a}}
		}
		m := min(n-k, w.size-len(w.cur.rows))
		at := len(w.cur.rows)
		w.cur.rows = w.cur.rows[:at+m]
		fill(w.cur.rows[at:], k)
		w.cur.pos.runs = append(w.cur.pos.runs, posRun{start: w.cur.pos.n, n: m, p: p})
		w.cur.pos.n += m
		p.Row += int64(m)
		k += m
		if len(w.cur.rows) == w.size {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// bad reports a row the source could not decode.
func (w *blockWriter[T]) bad(p Pos, err error) error {
	// A bad row was read: it counts in RowsIn (rows read = out + bad).
	w.o.rowsIn.Add(1)
	w.o.bad.Add(1)
	return w.r.bad.add(&RowError{Op: w.o.name, Pos: p, Err: err, decode: true})
}

func (w *blockWriter[T]) flush() error {
	b := w.cur
	w.cur = block[T]{}
	if len(b.rows) == 0 {
		w.o.release(b.w)
		return nil
	}
	// Give back what a short block did not use.
	if extra := b.w.rows - int64(len(b.rows)); extra > 0 {
		w.o.release(weight{rows: extra})
		b.w.rows -= extra
	}
	bytes, err := acquireBytes(w.ctx, w.o, b.rows, 0)
	if err != nil {
		return err
	}
	b.w.bytes = bytes
	b.fresh = true  // put and putRun copy rows into a new slice
	b.pooled = true // ... of its own, that no user function has seen
	w.o.rowsIn.Add(int64(len(b.rows)))
	w.o.rowsOut.Add(int64(len(b.rows)))
	return send(w.ctx, w.out, b)
}

// FromItems is a dataset of the given rows, in order. The slice is read
// while runs go, so do not change it until they end.
func FromItems[T any](items []T, opts ...Option) *Dataset[T] {
	return sourceOf("items", opts, 1, func(context.Context, *run) ([]partition[T], error) {
		return []partition[T]{{name: "items", read: func(ctx context.Context, w *blockWriter[T]) error {
			return w.putRun(items, Pos{Source: "items"})
		}}}, nil
	})
}

// Range is the dataset of the integers 0, 1, ..., n-1.
func Range(n int, opts ...Option) *Dataset[int] {
	return sourceOf("range", opts, 1, func(context.Context, *run) ([]partition[int], error) {
		if n < 0 {
			return nil, badArg("Range(%d): n must be 0 or more", n)
		}
		return []partition[int]{{name: "range", read: func(ctx context.Context, w *blockWriter[int]) error {
			return w.putFill(n, Pos{Source: "range"}, func(dst []int, lo int) {
				for i := range dst {
					dst[i] = lo + i
				}
			})
		}}}, nil
	})
}
