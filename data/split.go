package data

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
)

// Equal makes [Split] and [Shard] give every shard the same number of
// rows, like Ray's streaming_split(n, equal=True): of total rows, each
// shard gets total/n (rounded down) and the last total mod n rows of the
// dataset are dropped. Without it no row is dropped, and the first
// total mod n shards get one row more than the others. It does nothing
// elsewhere.
func Equal() Option { return optionFunc(func(c *config) { c.equal = true }) }

// Shards is a run of a dataset whose rows are dealt to n consumers, made
// by [Split]. Each shard is read by one consumer, through [Shards.Shard];
// the n consumers read at once, each at its own pace, and a consumer that
// stops reading soon holds the others back (backpressure: see [Split]).
// Its methods are safe for concurrent use.
type Shards[T any] struct {
	n     int
	r     *run
	o     *opState
	ctx   context.Context
	chans []chan block[T]
	gone  []chan struct{} // closed when a shard's consumer stops early
	taken []atomic.Bool

	done   chan struct{} // closed when the run has ended; err is then set
	err    error
	closed atomic.Bool
	once   sync.Once
}

// Split runs d once and deals its rows to n shards, one per consumer,
// like Ray Data's Dataset.streaming_split(n): typically one shard per
// train worker, each worker ranging over its own. Rows are dealt round
// robin in the dataset's order: the k-th row of shard i (from 0) is row
// k*n+i of d. So in an ordered run of a deterministic dataset (sources
// and operators that give the same rows in the same order each time,
// [RandomShuffle] with a fixed seed included), a shard's rows are a
// function of d, n and i: [Shard] gives shard i alone, the same rows, as
// a dataset of its own. A consumer that restarts can resume its shard
// with data.Skip(data.Shard(d, n, i), k), or all consumers at once with
// Split(ctx, data.Skip(d, k*n), n) when each has read k rows.
//
// With [Equal] every shard gets the same number of rows and the last
// total mod n rows are dropped (as Ray does), so that n workers that take
// a step together run out together; a shard's row is handed on only when
// the round of n rows it belongs to is complete. Without it every row is
// kept and the first total mod n shards get one more.
//
// Memory: each shard has a queue of a few blocks, sized so that all the
// queues together hold at most [MaxRowsInFlight] rows. A consumer that
// does not read fills its queue, and then the dealing stops (so the
// others wait) until it reads again: memory stays bounded, and consumers
// that read together (as train workers taking steps do) never wait on
// each other for long. Every shard must be read, or stopped by breaking
// out of its loop, or the run ended with [Shards.Close] or by cancelling
// ctx.
//
// The run's options are given as to any sink. Split returns an error at
// once for n < 1 or bad options; a failure of the run later (a bad row, a
// panic, a source error, ctx cancelled) ends every shard's iteration with
// that error, so no shard ever ends as complete after a failure.
func Split[T any](ctx context.Context, d *Dataset[T], n int, opts ...Option) (*Shards[T], error) {
	if err := checkRun(ctx, d, "Split"); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, badArg("Split(%d): n must be at least 1 (one shard per consumer)", n)
	}
	r, in, err := startRun(ctx, d, opts)
	if err != nil {
		return nil, err
	}
	cfg := r.cfg
	o, _ := r.op("split", nil)
	const depth = 2 // blocks queued per shard
	size := int(max(1, min(int64(cfg.blockRows), cfg.maxRows/int64(n*(depth+2)))))
	s := &Shards[T]{n: n, r: r, o: o, ctx: ctx, chans: make([]chan block[T], n), gone: make([]chan struct{}, n), taken: make([]atomic.Bool, n), done: make(chan struct{})}
	for i := range n {
		s.chans[i] = make(chan block[T], depth)
		s.gone[i] = make(chan struct{})
	}
	r.g.Go(func() error {
		defer o.finish()
		defer func() {
			for _, ch := range s.chans {
				close(ch)
			}
		}()
		return s.deal(in, size, cfg.equal)
	})
	stopProgress := startProgress(r)
	go func() {
		err := r.wait()
		stopProgress()
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		} else if s.closed.Load() && isContextErr(err) {
			err = nil // Close ended it
		}
		err = coded(err)
		r.report(err)
		s.err = err
		close(s.done)
	}()
	return s, nil
}

// deal hands rows out round robin, a round of n rows at a time.
func (s *Shards[T]) deal(in stream[T], size int, equal bool) error {
	ctx, o, n := s.r.ctx, s.o, s.n
	cur := make([]block[T], n)
	send := func(i int) error {
		b := cur[i]
		cur[i] = block[T]{}
		if len(b.rows) == 0 {
			return nil
		}
		k := int64(len(b.rows))
		b.w = weight{rows: k}
		maxAtomic(&o.peakRows, o.inFlight.Add(k))
		select {
		case s.chans[i] <- b:
			o.rowsOut.Add(k)
			return nil
		case <-s.gone[i]: // nobody reads this shard any more
			o.inFlight.Add(-k)
			return nil
		case <-ctx.Done():
			o.inFlight.Add(-k)
			return ctx.Err()
		}
	}
	put := func(i int, row T, p Pos) error {
		cur[i].rows = append(cur[i].rows, row)
		cur[i].pos.add(p)
		if len(cur[i].rows) >= size {
			return send(i)
		}
		return nil
	}
	round := make([]T, 0, n)
	roundPos := make([]Pos, 0, n)
	dealRound := func() error {
		for i := range round {
			if err := put(i, round[i], roundPos[i]); err != nil {
				return err
			}
		}
		clear(round)
		round, roundPos = round[:0], roundPos[:0]
		return nil
	}
	for {
		b, ok, err := recv(ctx, in.ch)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		o.rowsIn.Add(int64(len(b.rows)))
		for k, row := range b.rows {
			if !equal {
				// No round to complete: deal at once.
				round, roundPos = append(round, row), append(roundPos, b.pos.at(k))
				if err := put(len(round)-1, row, roundPos[len(round)-1]); err != nil {
					in.op.release(b.w)
					return err
				}
				if len(round) == n {
					clear(round)
					round, roundPos = round[:0], roundPos[:0]
				}
				continue
			}
			round, roundPos = append(round, row), append(roundPos, b.pos.at(k))
			if len(round) == n {
				if err := dealRound(); err != nil {
					in.op.release(b.w)
					return err
				}
			}
		}
		in.op.release(b.w)
	}
	// With Equal, the incomplete last round is dropped.
	for i := range n {
		if err := send(i); err != nil {
			return err
		}
	}
	return nil
}

// N is the number of shards.
func (s *Shards[T]) N() int { return s.n }

// Shard returns the rows of shard i (0 ≤ i < N) as an iterator, for one
// consumer to range over, once. Iteration ends after the shard's last row,
// or after yielding one final (zero, err) pair when the run fails or is
// cancelled (or when i is out of range or the shard is already being
// read). Breaking out of the loop gives up the rest of the shard: its
// rows are dropped from then on, and the other shards go on.
func (s *Shards[T]) Shard(i int) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		if i < 0 || i >= s.n {
			yield(zero, badArg("Shards.Shard(%d): there are %d shards, 0 to %d", i, s.n, s.n-1))
			return
		}
		if !s.taken[i].CompareAndSwap(false, true) {
			yield(zero, badArg("Shards.Shard(%d): the shard is already being read; each shard is read once, by one consumer", i))
			return
		}
		defer close(s.gone[i])
		ch := s.chans[i]
		for {
			select {
			case b, ok := <-ch:
				if !ok {
					<-s.done
					if s.err != nil {
						yield(zero, s.err)
					}
					return
				}
				s.o.inFlight.Add(-b.w.rows)
				s.r.sunk.Add(int64(len(b.rows)))
				for _, row := range b.rows {
					if !yield(row, nil) {
						return
					}
				}
			case <-s.done:
				if s.err != nil {
					yield(zero, s.err)
					return
				}
				// The run succeeded: what is left in ch is ours.
			}
		}
	}
}

// Shards returns the iterators of every shard, in order: Shards()[i] is
// Shard(i).
func (s *Shards[T]) Shards() []iter.Seq2[T, error] {
	out := make([]iter.Seq2[T, error], s.n)
	for i := range out {
		out[i] = s.Shard(i)
	}
	return out
}

// Close ends the run if it is still going (shards not yet read to the
// end then end with an error) and waits for it to stop and release what
// it holds. It returns the run's error: nil when it succeeded or was
// ended by Close, the failure otherwise. Calling it more than once is
// safe; deferring it after [Split] makes sure no goroutine outlives the
// consumers.
func (s *Shards[T]) Close() error {
	s.once.Do(func() {
		select {
		case <-s.done:
		default:
			s.closed.Store(true)
			s.r.cancel()
		}
	})
	<-s.done
	return s.err
}

// Wait waits for the run to end (every shard read to the end, or a
// failure) and returns its error.
func (s *Shards[T]) Wait() error {
	<-s.done
	return s.err
}

// Shard adds an operator that keeps shard i of n of d: the rows that
// [Split] with the same n (and [Equal], if given to Shard) deals to shard
// i, in the same order: rows i, i+n, i+2n, ... of d. It reads all of d to
// find them, so it costs n times what a Split shard does, but it needs
// nothing else: a consumer restarted alone (in another process, say)
// reads its shard again with it, and data.Skip(data.Shard(d, n, i), k)
// resumes it after the k rows it had read. As for Split, the rows are the
// same only in an ordered run of a deterministic dataset. Rows keep their
// positions. n must be at least 1 and i in [0, n).
func Shard[T any](d *Dataset[T], n, i int, opts ...Option) *Dataset[T] {
	switch {
	case d == nil:
		return failed[T](badArg("Shard: dataset is nil"))
	case n < 1:
		return failed[T](badArg("Shard(n=%d, i=%d): n must be at least 1", n, i))
	case i < 0 || i >= n:
		return failed[T](badArg("Shard(n=%d, i=%d): i must be in [0, %d)", n, i, n))
	}
	return &Dataset[T]{start: func(r *run) (stream[T], error) {
		in, err := d.start(r)
		if err != nil {
			return stream[T]{}, err
		}
		o, cfg := r.op("shard", opts)
		if err := cfg.err(); err != nil {
			return stream[T]{}, err
		}
		equal := cfg.equal
		ch := make(chan block[T], 2)
		r.g.Go(func() error {
			defer close(ch)
			defer o.finish()
			var j int64 // index in d of the next row
			var held T  // with Equal, this shard's row of the round under way
			var heldPos Pos
			have := false
			nn, ii := int64(n), int64(i)
			for {
				b, ok, err := recv(r.ctx, in.ch)
				if err != nil || !ok {
					return err
				}
				var out block[T]
				for k, row := range b.rows {
					idx := j
					j++
					if idx%nn == ii {
						if equal {
							held, heldPos, have = row, b.pos.at(k), true
						} else {
							out.rows = append(out.rows, row)
							out.pos.add(b.pos.at(k))
						}
					}
					if equal && have && idx%nn == nn-1 { // the round is complete
						out.rows = append(out.rows, held)
						out.pos.add(heldPos)
						var zero T
						held, have = zero, false
					}
				}
				o.rowsIn.Add(int64(len(b.rows)) - int64(len(out.rows)))
				if err := pass(r.ctx, o, in.op, b.w, out, ch); err != nil {
					return err
				}
			}
		})
		return stream[T]{ch: ch, op: o}, nil
	}}
}
