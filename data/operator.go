package data

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// kernel applies an operator to one block's rows.
type kernel[I, O any] func(ctx context.Context, rows []I) (result[O], error)

// result is a kernel's output for one block. sel, when set, is the input
// row of each output row (a filter's); else perRow, when set, counts the
// outputs of each input row (a row that failed has none); when both are
// nil, out is one row per input row if the lengths match, and otherwise a
// batch's output that is attributed to the batch's first row.
type result[O any] struct {
	out    []O
	sel    []int32
	perRow []int32
	failed []failure
}

// failure is the error of one input row of a block.
type failure struct {
	index int
	err   error
}

// binder builds an operator's kernel when a run starts (an actor pool
// starts its actors here and stops them when the run ends).
type binder[I, O any] func(r *run, o *opState, cfg *config) (kernel[I, O], error)

// fuseKind says whether an operator may run fused with its neighbours in
// one stage (see stage).
type fuseKind int

const (
	fuseNone  fuseKind = iota // runs as a stage of its own (actor pools)
	fuseKeeps                 // at most one row out per row in (Map, Filter)
	fuseGrows                 // may make more rows than it takes (FlatMap, MapBatches): ends a stage
)

// operator adds an operator to d's plan. Operators of kind fuseKeeps and
// fuseGrows that run in the driver are fused with the driver-side
// operators before them when their options allow it (see canFuse).
//
// owned, when set, is the kernel to use instead of bind's when the
// operator is fused after another: its input rows are then the output of
// the operator before it, which nothing else holds, and owned may write
// over them.
func operator[I, O any](d *Dataset[I], name string, bind binder[I, O], owned kernel[I, O], opts []Option, fuse fuseKind) *Dataset[O] {
	if d == nil {
		return failed[O](badArg("%s: the input dataset is nil", name))
	}
	st := func(r *run) (*stage[O], error) {
		var prev *stage[I]
		var in stream[I]
		var err error
		if d.stage != nil {
			prev, err = d.stage(r)
		} else {
			in, err = d.start(r)
		}
		if err != nil {
			return nil, err
		}
		o, cfg := r.op(name, opts)
		if err := cfg.err(); err != nil {
			return nil, fmt.Errorf("operator %s: %w", o.name, err)
		}
		if cfg.batchSize > 0 && int64(cfg.batchSize) > cfg.maxRows {
			return nil, badArg("%s: batch size %d is larger than MaxRowsInFlight(%d); a batch must fit under the cap", o.name, cfg.batchSize, cfg.maxRows)
		}
		k, err := bind(r, o, cfg)
		if err != nil {
			return nil, fmt.Errorf("operator %s: %w", o.name, err)
		}
		if prev != nil && fuse != fuseNone && canFuse(prev, cfg) {
			if owned != nil {
				k = owned // canFuse: the kernel runs in the driver
			}
			return fuseInto(r, prev, o, k, owned != nil, fuse == fuseGrows), nil
		}
		if prev != nil {
			in = prev.start(r)
		}
		if cfg.compute != nil {
			owned = nil // the kernel runs on the cluster
		}
		return newStage(r, o, cfg, in, k, owned, fuse != fuseKeeps || cfg.compute != nil), nil
	}
	out := &Dataset[O]{start: func(r *run) (stream[O], error) {
		s, err := st(r)
		if err != nil {
			return stream[O]{}, err
		}
		return s.start(r), nil
	}}
	if fuse != fuseNone {
		out.stage = st
	}
	return out
}

// stage is one or more operators that run as one set of goroutines: an
// intake that admits blocks under the first operator's caps (and cuts
// them into batches), Concurrency workers that run every operator's
// kernel on a block in turn, and an emitter that hands results on, in
// input order unless the run is unordered. Consecutive driver-side
// operators share a stage, as Ray Data fuses map operators: a block makes
// one hop between goroutines per stage, not per operator.
//
// Each operator keeps its own counters, bad rows and positions. A block
// holds rows of the first operator's caps from intake until the stage's
// consumer takes it; as it moves through the stage its rows count as in
// flight on the operator it is at (the last one once done), so every
// operator's rows in flight stay within the first one's cap, which
// canFuse requires to be no larger than theirs.
type stage[O any] struct {
	ops   []*opState
	cfg   *config // the first operator's
	grows bool    // nothing may fuse after the last operator: it may make more rows than it takes, or runs on the cluster
	// intake admits the stage's input blocks (of the first operator's
	// input type) and sends each to work, numbered in order.
	intake func(ctx context.Context, work chan<- any) error
	// apply runs the stage's operators on one block from intake.
	apply func(ctx context.Context, b any) (block[O], error)
}

// canFuse says whether an operator with options cfg may run in stage s:
// it runs in the driver, on blocks as they come, with the same
// concurrency and order, no byte cap (Map can change the bytes of a row,
// so a later operator's byte cap would need its own admission), and a
// row cap no smaller than the stage's; and no operator before it in the
// stage makes more rows than it takes.
func canFuse[I any](s *stage[I], cfg *config) bool {
	return !s.grows && cfg.compute == nil && cfg.batchSize == 0 &&
		cfg.maxBytes == 0 && s.cfg.maxBytes == 0 &&
		cfg.concurrency == s.cfg.concurrency && cfg.unordered == s.cfg.unordered &&
		cfg.maxRows >= s.ops[0].maxRows
}

// newStage makes a stage of one operator o, with kernel k, reading in.
// owned, when set, is o's kernel that writes over its input: it runs on
// the blocks that only the stage holds (a source's, see block.fresh).
func newStage[I, O any](r *run, o *opState, cfg *config, in stream[I], k, owned kernel[I, O], closed bool) *stage[O] {
	return &stage[O]{
		ops: []*opState{o}, cfg: cfg, grows: closed,
		intake: func(ctx context.Context, work chan<- any) error {
			return intake(ctx, o, cfg.batchSize, in, func(b block[I]) error { return send(ctx, work, any(b)) })
		},
		apply: func(ctx context.Context, v any) (block[O], error) {
			b := v.(block[I])
			if b.fresh && owned != nil {
				return process(ctx, r, o, owned, true, b)
			}
			return process(ctx, r, o, k, false, b)
		},
	}
}

// fuseInto adds operator o, with kernel k, to the end of stage s. owned
// says k is the operator's own kernel that writes over its input.
func fuseInto[I, O any](r *run, s *stage[I], o *opState, k kernel[I, O], owned, grows bool) *stage[O] {
	prev := s.ops[len(s.ops)-1]
	// Blocks leave the stage holding the first operator's caps; o's
	// consumer releases them through o.
	o.rowSem = s.ops[0].rowSem
	apply := s.apply
	return &stage[O]{
		ops: append(slices.Clip(s.ops), o), cfg: s.cfg, grows: grows, intake: s.intake,
		apply: func(ctx context.Context, v any) (block[O], error) {
			b, err := apply(ctx, v)
			if err != nil {
				return block[O]{}, err
			}
			prev.handOver(o, b.w)
			o.rowsIn.Add(int64(len(b.rows)))
			if len(b.rows) == 0 {
				return block[O]{seq: b.seq, w: b.w}, nil
			}
			return process(ctx, r, o, k, owned, b)
		},
	}
}

// start starts the stage's goroutines.
func (s *stage[O]) start(r *run) stream[O] {
	ctx := r.ctx
	conc := s.cfg.concurrency
	last := s.ops[len(s.ops)-1]
	// Buffered channels let a step hand on several blocks per wake-up;
	// blocks in them still hold their weight, so the caps are unchanged.
	work := make(chan any, conc)
	done := make(chan block[O], conc)
	out := make(chan block[O], 2)

	r.g.Go(func() error {
		defer close(work)
		return s.intake(ctx, work)
	})
	var workers sync.WaitGroup
	workers.Add(conc)
	for range conc {
		r.g.Go(func() error {
			defer workers.Done()
			for {
				b, ok, err := recv(ctx, work)
				if !ok {
					return err
				}
				res, err := s.apply(ctx, b)
				if err != nil {
					return err
				}
				if err := send(ctx, done, res); err != nil {
					return err
				}
			}
		})
	}
	r.g.Go(func() error {
		workers.Wait()
		close(done)
		return nil
	})
	r.g.Go(func() error {
		defer close(out)
		defer func() {
			for _, o := range s.ops {
				o.finish()
			}
		}()
		return emit(ctx, last, !s.cfg.unordered, done, out)
	})
	return stream[O]{ch: out, op: last}
}

// intake admits blocks from in under o's caps, releasing them from the
// upstream operator, and cuts them into batches of batchSize rows when
// batchSize > 0. Blocks get consecutive sequence numbers and go to put.
func intake[I any](ctx context.Context, o *opState, batchSize int, in stream[I], put func(block[I]) error) error {
	var seq int64
	var buf block[I]
	next := func(b block[I]) error {
		b.seq = seq
		seq++
		return put(b)
	}
	for {
		b, ok, err := recv(ctx, in.ch)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		// A block larger than the room the cap leaves is admitted in
		// pieces; the upstream operator keeps its weight until the last.
		up := b.w
		for len(b.rows) > 0 {
			piece := b
			if room := int(o.maxRows - buf.w.rows); len(b.rows) > room {
				piece, b = cut(b, room)
			} else {
				b = block[I]{}
			}
			w, err := admit(ctx, o, piece.rows, buf.w)
			if err != nil {
				return err
			}
			o.rowsIn.Add(int64(len(piece.rows)))
			if batchSize == 0 {
				piece.w = w
				if err := next(piece); err != nil {
					return err
				}
				continue
			}
			buf.rows = append(buf.rows, piece.rows...)
			buf.pos.appendAll(&piece.pos)
			buf.w = buf.w.plus(w)
			for len(buf.rows) >= batchSize {
				var head block[I]
				head, buf = cut(buf, batchSize)
				if err := next(head); err != nil {
					return err
				}
			}
		}
		in.op.release(up)
	}
	if len(buf.rows) > 0 {
		return next(buf)
	}
	return nil
}

// cut splits b after n rows, sharing its weight in proportion.
func cut[T any](b block[T], n int) (head, tail block[T]) {
	total := len(b.rows)
	head.rows, tail.rows = b.rows[:n:n], b.rows[n:]
	head.fresh, tail.fresh = b.fresh, b.fresh // disjoint parts of one slice
	// but not pooled: giving back one part's array would give the other's
	head.pos, tail.pos = b.pos.split(n)
	head.w.rows = min(b.w.rows, int64(n))
	head.w.bytes = b.w.bytes * int64(n) / int64(total)
	tail.w = weight{b.w.rows - head.w.rows, b.w.bytes - head.w.bytes}
	return head, tail
}

// process runs the kernel on one block and accounts for its bad rows.
// owned says k is data's own kernel that writes over its input (Map's or
// Filter's, whose functions see rows, never the slice): its output is
// still pooled (see block.pooled) when the input was and it wrote over
// the input's array.
func process[I, O any](ctx context.Context, r *run, o *opState, k kernel[I, O], owned bool, b block[I]) (block[O], error) {
	var res result[O]
	err := recovered(o.name, func() (err error) {
		res, err = k(ctx, b.rows)
		return err
	})
	if _, ok := err.(*PanicError); ok {
		return block[O]{}, err // a bug, not a bad row: it fails the run
	}
	if te := (*ray.TaskError)(nil); errors.As(err, &te) && te.Panicked {
		// The same for a task or actor method that panicked in a worker.
		return block[O]{}, &PanicError{Op: o.name, Value: err, Stack: []byte(te.Stack)}
	}
	if cerr := ctx.Err(); cerr != nil {
		return block[O]{}, cerr
	}
	if err != nil {
		if !userError(err) {
			return block[O]{}, fmt.Errorf("data: %s: %w", o.name, err)
		}
		// The user's function failed the whole batch: every row of it is bad.
		res = result[O]{perRow: make([]int32, len(b.rows)), failed: make([]failure, len(b.rows))}
		for i := range b.rows {
			res.failed[i] = failure{index: i, err: err}
		}
	}
	for _, f := range res.failed {
		o.bad.Add(1)
		if err := r.bad.add(&RowError{Op: o.name, Pos: b.pos.at(f.index), Err: f.err}); err != nil {
			return block[O]{}, err
		}
	}
	o.rowsOut.Add(int64(len(res.out)))
	pooled := owned && b.pooled && sameArray(res.out, b.rows)
	return block[O]{seq: b.seq, rows: res.out, pos: outPos(&b.pos, res), w: b.w, pooled: pooled}, nil
}

// sameArray says whether out starts at the start of in's array.
func sameArray[I, O any](out []O, in []I) bool {
	return cap(out) > 0 && cap(in) > 0 && unsafe.Pointer(unsafe.SliceData(out)) == unsafe.Pointer(unsafe.SliceData(in))
}

// outPos says where each output row came from.
func outPos[O any](in *positions, res result[O]) positions {
	switch {
	case res.sel != nil:
		return in.pick(res.sel)
	case res.perRow != nil:
		sel := make([]int32, 0, len(res.out))
		for i, n := range res.perRow {
			for range n {
				sel = append(sel, int32(i))
			}
		}
		return in.pick(sel)
	case len(res.out) == in.len():
		return *in
	default:
		return in.pick(make([]int32, len(res.out))) // all from the batch's first row
	}
}

// emit hands finished blocks on, in sequence order when ordered. Empty
// blocks (everything filtered out) release their weight at once.
func emit[O any](ctx context.Context, o *opState, ordered bool, done <-chan block[O], out chan<- block[O]) error {
	pending := map[int64]block[O]{}
	var next, outSeq int64
	hand := func(b block[O]) error {
		if len(b.rows) == 0 {
			o.release(b.w)
			return nil
		}
		b.seq = outSeq
		outSeq++
		return send(ctx, out, b)
	}
	for {
		b, ok, err := recv(ctx, done)
		if err != nil {
			return err
		}
		if !ok {
			if len(pending) > 0 {
				return backend.Errorf(backend.Internal, "", "data: internal error: blocks lost in reordering")
			}
			return nil
		}
		if !ordered {
			if err := hand(b); err != nil {
				return err
			}
			continue
		}
		pending[b.seq] = b
		for {
			nb, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if err := hand(nb); err != nil {
				return err
			}
		}
	}
}

// userError says whether a batch's error came from the user's function
// (its rows are bad rows) rather than from the cluster (an actor that
// died, a cluster that closed), which fails the run.
func userError(err error) bool {
	switch ray.CodeOf(err) {
	case ray.Unknown, ray.TaskFailed:
		return true
	default:
		return false
	}
}
