package data

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// kernel applies an operator to one block's rows.
type kernel[I, O any] func(ctx context.Context, rows []I) (result[O], error)

// result is a kernel's output for one block. perRow, when set, counts the
// outputs of each input row (a row that failed has none); when nil, out is
// one row per input row if the lengths match, and otherwise a batch's
// output that is attributed to the batch's first row.
type result[O any] struct {
	out    []O
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

// operator adds an operator to d's plan.
func operator[I, O any](d *Dataset[I], name string, bind binder[I, O], opts []Option) *Dataset[O] {
	if d == nil {
		return failed[O](badArg("%s: the input dataset is nil", name))
	}
	return &Dataset[O]{start: func(r *run) (stream[O], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[O]{}, err
		}
		o, cfg := r.op(name, opts)
		if err := cfg.err(); err != nil {
			return stream[O]{}, fmt.Errorf("operator %s: %w", o.name, err)
		}
		if cfg.batchSize > 0 && int64(cfg.batchSize) > cfg.maxRows {
			return stream[O]{}, badArg("%s: batch size %d is larger than MaxRowsInFlight(%d); a batch must fit under the cap", o.name, cfg.batchSize, cfg.maxRows)
		}
		k, err := bind(r, o, cfg)
		if err != nil {
			return stream[O]{}, fmt.Errorf("operator %s: %w", o.name, err)
		}
		return startOperator(r, o, cfg, in, k), nil
	}}
}

// startOperator starts an operator's goroutines: one intake that admits
// blocks under the caps (and cuts them into batches), cfg.concurrency
// workers that run the kernel, and one emitter that hands results on, in
// input order unless the run is unordered.
func startOperator[I, O any](r *run, o *opState, cfg *config, in stream[I], k kernel[I, O]) stream[O] {
	ctx := r.ctx
	// Buffered channels let a stage hand on several blocks per wake-up;
	// blocks in them still hold their weight, so the caps are unchanged.
	work := make(chan block[I], cfg.concurrency)
	done := make(chan block[O], cfg.concurrency)
	out := make(chan block[O], 2)

	r.g.Go(func() error {
		defer close(work)
		return intake(ctx, o, cfg.batchSize, in, work)
	})
	var workers sync.WaitGroup
	workers.Add(cfg.concurrency)
	for range cfg.concurrency {
		r.g.Go(func() error {
			defer workers.Done()
			for {
				b, ok, err := recv(ctx, work)
				if !ok {
					return err
				}
				res, err := process(ctx, r, o, k, b)
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
		defer o.finish()
		return emit(ctx, o, !cfg.unordered, done, out)
	})
	return stream[O]{ch: out, op: o}
}

// intake admits blocks from in under o's caps, releasing them from the
// upstream operator, and cuts them into batches of batchSize rows when
// batchSize > 0. Blocks get consecutive sequence numbers.
func intake[I any](ctx context.Context, o *opState, batchSize int, in stream[I], work chan<- block[I]) error {
	var seq int64
	var buf block[I]
	next := func(b block[I]) error {
		b.seq = seq
		seq++
		return send(ctx, work, b)
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
	head.pos, tail.pos = b.pos.split(n)
	head.w.rows = min(b.w.rows, int64(n))
	head.w.bytes = b.w.bytes * int64(n) / int64(total)
	tail.w = weight{b.w.rows - head.w.rows, b.w.bytes - head.w.bytes}
	return head, tail
}

// process runs the kernel on one block and accounts for its bad rows.
func process[I, O any](ctx context.Context, r *run, o *opState, k kernel[I, O], b block[I]) (block[O], error) {
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
	return block[O]{seq: b.seq, rows: res.out, pos: outPos(&b.pos, res), w: b.w}, nil
}

// outPos says where each output row came from.
func outPos[O any](in *positions, res result[O]) positions {
	switch {
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
