package data

import (
	"context"
	"errors"
	"iter"
)

// errStop ends a run early without error (Take, a loop that breaks).
var errStop = errors.New("data: stop")

// startRun validates a sink's options and starts a run of d. If d cannot
// start, the run is ended and reported, and the error returned (ctx's own
// error when ctx ended).
func startRun[T any](ctx context.Context, d *Dataset[T], opts []Option) (*run, stream[T], error) {
	return startRunPool(ctx, d, opts, false)
}

// startRunPool is startRun; with pool, the run's sources fill arrays that
// the sink gives back (see rowPool), for a sink that keeps no rows.
func startRunPool[T any](ctx context.Context, d *Dataset[T], opts []Option, pool bool) (*run, stream[T], error) {
	if err := checkRun(ctx, d, "a sink"); err != nil {
		return nil, stream[T]{}, err
	}
	cfg := defaultConfig()
	cfg.with(opts)
	if err := cfg.err(); err != nil {
		return nil, stream[T]{}, err
	}
	r := newRun(ctx, &cfg)
	if pool {
		r.rows = &rowPool{}
	}
	s, err := d.start(r)
	if err != nil {
		r.cancel()
		r.wait()
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		err = coded(err)
		r.report(err)
		return nil, stream[T]{}, err
	}
	return r, s, nil
}

// checkRun refuses a nil context or dataset given to a sink, with an
// InvalidArgument error instead of a panic.
func checkRun[T any](ctx context.Context, d *Dataset[T], sink string) error {
	switch {
	case ctx == nil:
		return badArg("%s: nil context (pass context.Background() or the caller's context)", sink)
	case d == nil:
		return badArg("%s: nil dataset (make datasets with FromItems, ReadJSONL and the other sources)", sink)
	}
	return nil
}

// drain runs d and calls each with every output block, on the calling
// goroutine, until the run ends, fails or each returns an error. It
// returns the run's first error; a context error is returned as it is.
func drain[T any](ctx context.Context, d *Dataset[T], opts []Option, each func(rows []T) error) error {
	return drainRows(ctx, d, opts, false, each)
}

// drainRows is drain; with keepsNone (each keeps neither the slice nor
// its rows once it returns), pooled blocks' arrays go back to the run's
// sources once each has returned.
func drainRows[T any](ctx context.Context, d *Dataset[T], opts []Option, keepsNone bool, each func(rows []T) error) error {
	r, s, err := startRunPool(ctx, d, opts, keepsNone)
	if err != nil {
		return err
	}
	stopProgress := startProgress(r)
	finished := false
	defer func() {
		if !finished { // each panicked or its goroutine exited (t.Fatal)
			r.cancel()
			r.wait()
			stopProgress()
		}
	}()
	var sinkErr error
	for {
		b, ok, err := recv(r.ctx, s.ch)
		if !ok || err != nil {
			break // the run ended or failed; wait says which
		}
		sinkErr = each(b.rows)
		r.sunk.Add(int64(len(b.rows)))
		s.op.release(b.w)
		if keepsNone && b.pooled {
			r.rows.put(b.rows[:0])
		}
		if sinkErr != nil {
			r.cancel()
			break
		}
	}
	finished = true
	err = r.wait()
	stopProgress()
	if sinkErr != nil {
		err = sinkErr
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// A run cut short by ctx must not look complete, and its error
		// is the context's, as it is.
		err = cerr
	}
	err = coded(err)
	r.report(err)
	return err
}

// Rows runs d and returns its rows as an iterator, in order unless
// [Unordered]. Iteration ends after the last row, or after yielding one
// final (zero, err) pair when the run fails. Breaking out of the loop
// cancels the run and waits for every operator to stop and release what
// it holds.
//
//	for row, err := range data.Rows(ctx, ds) {
//		if err != nil { return err }
//		...
//	}
func Rows[T any](ctx context.Context, d *Dataset[T], opts ...Option) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		if err := checkRun(ctx, d, "Rows"); err != nil {
			yield(*new(T), err)
			return
		}
		err := drain(ctx, d, opts, func(rows []T) error {
			for _, row := range rows {
				if !yield(row, nil) {
					return errStop
				}
			}
			return nil
		})
		if err != nil {
			var zero T
			yield(zero, err)
		}
	}
}

// Take runs d until it has n rows (n must be at least 0) and returns them;
// the run stops as soon as it has them. It returns fewer when d has fewer.
func Take[T any](ctx context.Context, d *Dataset[T], n int, opts ...Option) ([]T, error) {
	if n < 0 {
		return nil, badArg("Take(%d): n must be 0 or more", n)
	}
	if err := checkRun(ctx, d, "Take"); err != nil {
		return nil, err
	}
	out := make([]T, 0, min(n, 1<<16))
	if n == 0 {
		return out, nil
	}
	err := drain(ctx, d, opts, func(rows []T) error {
		k := min(len(rows), n-len(out))
		out = append(out, rows[:k]...)
		if len(out) == n {
			return errStop
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Count runs d and returns its number of rows.
func Count[T any](ctx context.Context, d *Dataset[T], opts ...Option) (int64, error) {
	if err := checkRun(ctx, d, "Count"); err != nil {
		return 0, err
	}
	var n int64
	err := drainRows(ctx, d, opts, true, func(rows []T) error { // keeps no rows
		n += int64(len(rows))
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
