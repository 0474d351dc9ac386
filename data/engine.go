package data

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// block is the unit that flows between operators: some rows, where each
// came from, and the weight it holds on the operator that produced it.
type block[T any] struct {
	seq  int64
	rows []T
	pos  positions
	w    weight
	// fresh: rows is a slice that only this block holds (a source made
	// it), so the first operator that takes the block may write over it.
	fresh bool
	// pooled: rows is still a whole array a source made, and only data's
	// own in-place kernels (Map, Filter) have written it; no user
	// function has seen the slice. A sink that keeps no rows gives it
	// back to the run's pool (see rowPool). cut clears it: its halves
	// share one array.
	pooled bool
}

// rowPool holds row arrays that a sink that keeps no rows (Count) gave
// back, for the run's sources to fill again. Only blocks marked pooled go
// in, once the sink is done with them, so nothing else holds them.
type rowPool struct {
	mu   sync.Mutex
	free []any // []T of a source's row type
}

// get returns an array given back, or nil.
func (p *rowPool) get() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	v := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return v
}

// put gives back an array; a few are kept, the rest left to the GC.
func (p *rowPool) put(v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < 64 {
		p.free = append(p.free, v)
	}
}

// weight is what a block holds on an operator's in-flight caps.
type weight struct{ rows, bytes int64 }

func (w weight) plus(o weight) weight { return weight{w.rows + o.rows, w.bytes + o.bytes} }

// stream is an operator's output: blocks, and the operator whose caps they
// hold until the consumer takes them.
type stream[T any] struct {
	ch <-chan block[T]
	op *opState
}

// opState is one operator of a run: its caps and counters.
type opState struct {
	name               string
	maxRows, maxBytes  int64
	rowSem, byteSem    *semaphore.Weighted
	inFlight, inBytes  atomic.Int64
	peakRows, peakByte atomic.Int64
	rowsIn, rowsOut    atomic.Int64
	bad                atomic.Int64
	start              time.Time
	end                atomic.Int64 // unix nanos when the operator finished
	pool               func() PoolStats
	mem                *memStats // all-to-all operators: memory held and spilled
}

func newOpState(name string, cfg *config) *opState {
	o := &opState{name: name, maxRows: cfg.maxRows, maxBytes: cfg.maxBytes, start: time.Now()}
	o.rowSem = semaphore.NewWeighted(cfg.maxRows)
	if cfg.maxBytes > 0 {
		o.byteSem = semaphore.NewWeighted(cfg.maxBytes)
	}
	return o
}

// acquireRows admits n rows, or as many as the cap allows beside what the
// caller already holds (a half-built batch never waits for itself).
// Callers pass at most the room left (intake cuts larger blocks, sources
// make blocks no larger than the cap), so the count is exact.
func (o *opState) acquireRows(ctx context.Context, n int, held int64) (int64, error) {
	k := min(int64(n), o.maxRows-held)
	if k <= 0 {
		return 0, nil
	}
	if err := o.rowSem.Acquire(ctx, k); err != nil {
		return 0, err
	}
	maxAtomic(&o.peakRows, o.inFlight.Add(k))
	return k, nil
}

// acquireBytes is acquireRows for the byte cap; rows are sized only when
// the cap is set.
func acquireBytes[T any](ctx context.Context, o *opState, rows []T, held int64) (int64, error) {
	if o.byteSem == nil {
		return 0, nil
	}
	var n int64
	for i := range rows {
		n += sizeOf(&rows[i])
	}
	k := min(n, o.maxBytes-held)
	if k <= 0 {
		return 0, nil
	}
	if err := o.byteSem.Acquire(ctx, k); err != nil {
		return 0, err
	}
	maxAtomic(&o.peakByte, o.inBytes.Add(k))
	return k, nil
}

// admit takes a block of rows into o: rows first, then bytes.
func admit[T any](ctx context.Context, o *opState, rows []T, held weight) (weight, error) {
	r, err := o.acquireRows(ctx, len(rows), held.rows)
	if err != nil {
		return weight{}, err
	}
	b, err := acquireBytes(ctx, o, rows, held.bytes)
	if err != nil {
		o.release(weight{rows: r})
		return weight{}, err
	}
	return weight{r, b}, nil
}

func (o *opState) release(w weight) {
	if w.rows > 0 {
		o.inFlight.Add(-w.rows)
		o.rowSem.Release(w.rows)
	}
	if w.bytes > 0 {
		o.inBytes.Add(-w.bytes)
		o.byteSem.Release(w.bytes)
	}
}

// handOver moves a block's rows in flight from o to to, the next
// operator of a stage, which shares o's caps (see stage).
func (o *opState) handOver(to *opState, w weight) {
	if w.rows > 0 {
		o.inFlight.Add(-w.rows)
		maxAtomic(&to.peakRows, to.inFlight.Add(w.rows))
	}
}

func (o *opState) finish() { o.end.CompareAndSwap(0, time.Now().UnixNano()) }

func maxAtomic(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// run is one execution of a dataset's plan.
type run struct {
	ctx    context.Context
	cancel context.CancelFunc
	g      *errgroup.Group
	cfg    *config
	bad    *badRows

	start    time.Time
	sunk     atomic.Int64 // rows the sink took
	mu       sync.Mutex
	ops      []*opState
	cleanups []func(context.Context)

	// root is the run that a sub-run (see sub) belongs to: operators and
	// cleanups are registered there. nil for the run itself.
	root *run
	// rows, when set (the sink keeps no rows), takes back pooled blocks'
	// arrays for the sources; sub-runs share the root's.
	rows *rowPool
}

// sub makes a sub-run: the same run, whose goroutines get a context and
// an errgroup of their own, so that an operator that needs no more input
// ([Limit]) can stop its upstream, and wait for it, without ending the
// run. The caller waits for sub.g; a failure in the sub-run cancels only
// the sub-run, so the caller must return sub.g.Wait()'s error.
func (r *run) sub() *run {
	ctx, cancel := context.WithCancel(r.ctx)
	g, ctx := errgroup.WithContext(ctx)
	root := r
	if r.root != nil {
		root = r.root
	}
	return &run{ctx: ctx, cancel: cancel, g: g, cfg: r.cfg, bad: r.bad, start: r.start, root: root, rows: r.rows}
}

func newRun(ctx context.Context, cfg *config) *run {
	ctx, cancel := context.WithCancel(ctx)
	g, ctx := errgroup.WithContext(ctx)
	return &run{ctx: ctx, cancel: cancel, g: g, cfg: cfg, bad: &badRows{max: cfg.maxBad}, start: time.Now()}
}

// op registers an operator, with the run's defaults overridden by opts.
func (r *run) op(name string, opts []Option) (*opState, *config) {
	if r.root != nil {
		return r.root.op(name, opts)
	}
	cfg := *r.cfg
	cfg.name, cfg.compute, cfg.batchSize, cfg.errs, cfg.concSet = "", nil, 0, nil, false
	cfg.descending = false
	cfg.with(opts)
	if cfg.name != "" {
		name = cfg.name
	}
	o := newOpState(name, &cfg)
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
	return o, &cfg
}

// onEnd registers cleanup to run when the run ends, on every path, with a
// context that is not cancelled.
func (r *run) onEnd(f func(context.Context)) {
	if r.root != nil {
		r.root.onEnd(f)
		return
	}
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

// wait waits for every goroutine of the run, then runs the cleanups in
// reverse order.
func (r *run) wait() error {
	err := r.g.Wait()
	r.cancel()
	r.mu.Lock()
	cs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	ctx := context.WithoutCancel(r.ctx)
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i](ctx)
	}
	return err
}

// send delivers b on ch unless the run is cancelled.
func send[T any](ctx context.Context, ch chan<- T, v T) error {
	select {
	case ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recv takes the next value of ch; ok is false when ch is closed.
func recv[T any](ctx context.Context, ch <-chan T) (v T, ok bool, err error) {
	select {
	case v, ok = <-ch:
		return v, ok, nil
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}
