package train

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/goray-dev/goray/backend"
)

// Number is the element type of a collective: a numeric slice is sent as
// its raw bytes.
type Number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~int | ~uint32 | ~uint64
}

// Op is the reduction of [AllReduce].
type Op int

const (
	// Sum adds the ranks' elements.
	Sum Op = iota
	// Mean adds the ranks' elements and divides by the world size
	// (integer division for integer types).
	Mean
	// Max keeps the largest element.
	Max
	// Min keeps the smallest element.
	Min
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Mean:
		return "Mean"
	case Max:
		return "Max"
	case Min:
		return "Min"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

func asBytes[T Number](xs []T) []byte {
	if len(xs) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), len(xs)*int(unsafe.Sizeof(xs[0])))
}

// scratch returns a reusable buffer of n elements of T.
func scratch[T Number](r *ring, n int) []T {
	var zero T
	words := (n*int(unsafe.Sizeof(zero)) + 7) / 8
	if cap(r.scratch) < words {
		r.scratch = make([]uint64, words)
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(r.scratch[:words]))), n)
}

func reduce[T Number](dst, src []T, op Op) {
	switch op {
	case Sum, Mean:
		for i, v := range src {
			dst[i] += v
		}
	case Max:
		for i, v := range src {
			dst[i] = max(dst[i], v)
		}
	case Min:
		for i, v := range src {
			dst[i] = min(dst[i], v)
		}
	}
}

// AllReduce reduces xs element-wise across every worker of the run with op
// and leaves the result in xs on every worker. Every worker must call it
// with a slice of the same length, in the same order relative to its other
// collectives.
//
// It uses a ring (reduce-scatter, then all-gather): each worker sends and
// receives 2(n-1)/n times the size of xs, whatever the world size n.
//
// When another worker fails, it returns a [*WorkerFailedError] naming that
// worker's rank; when ctx ends, ctx.Err() (and the run's other workers fail
// theirs).
func AllReduce[T Number](ctx context.Context, w *Worker, xs []T, op Op) error {
	if op < Sum || op > Min {
		return backend.Errorf(backend.InvalidArgument, "", "train.AllReduce: unknown op %v: use Sum, Mean, Max or Min", op)
	}
	r := w.ring
	err := r.run(ctx, opAllReduce, func(seq uint32) error {
		n := r.size
		if n == 1 {
			return nil
		}
		lo := func(c int) int { return c * len(xs) / n }
		tmp := scratch[T](r, (len(xs)+n-1)/n)
		// Reduce-scatter: after n-1 steps rank r holds chunk r+1 reduced.
		for s := range n - 1 {
			sc, rc := mod(r.rank-s, n), mod(r.rank-s-1, n)
			in := tmp[:lo(rc+1)-lo(rc)]
			if err := r.exchange(opAllReduce, seq, asBytes(xs[lo(sc):lo(sc+1)]), exactly(asBytes(in))); err != nil {
				return err
			}
			reduce(xs[lo(rc):lo(rc+1)], in, op)
		}
		// All-gather the reduced chunks.
		for s := range n - 1 {
			sc, rc := mod(r.rank+1-s, n), mod(r.rank-s, n)
			if err := r.exchange(opAllReduce, seq, asBytes(xs[lo(sc):lo(sc+1)]), exactly(asBytes(xs[lo(rc):lo(rc+1)]))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if op == Mean && r.size > 1 {
		d := T(r.size)
		for i := range xs {
			xs[i] /= d
		}
	}
	return nil
}

// broadcastChunk is the pipelining unit of Broadcast, in bytes.
const broadcastChunk = 1 << 20

// Broadcast copies root's xs into xs on every worker. Every worker must pass
// a slice of the same length. It pipelines chunks around the ring: each
// worker receives and sends the size of xs once. Failures are reported as
// for [AllReduce].
func Broadcast[T Number](ctx context.Context, w *Worker, xs []T, root int) error {
	r := w.ring
	if root < 0 || root >= r.size {
		return backend.Errorf(backend.InvalidArgument, "", "train.Broadcast: root %d is not a rank: valid ranks are 0 to %d", root, r.size-1)
	}
	return r.run(ctx, opBroadcast, func(seq uint32) error {
		if r.size == 1 {
			return nil
		}
		b := asBytes(xs)
		forward := r.nextRank() != root
		for off := 0; off == 0 || off < len(b); off += broadcastChunk {
			chunk := b[off:min(off+broadcastChunk, len(b))]
			if r.rank != root {
				if err := r.recv(opBroadcast, seq, exactly(chunk)); err != nil {
					return err
				}
			}
			if forward {
				if err := r.send(opBroadcast, seq, chunk); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// AllGather returns every worker's xs, indexed by rank (the slices may
// differ in length). Each worker sends and receives the other workers' data
// once. Failures are reported as for [AllReduce].
func AllGather[T Number](ctx context.Context, w *Worker, xs []T) ([][]T, error) {
	r := w.ring
	out := make([][]T, r.size)
	out[r.rank] = slices.Clone(xs)
	err := r.run(ctx, opAllGather, func(seq uint32) error {
		n := r.size
		for s := range n - 1 {
			sb, rb := mod(r.rank-s, n), mod(r.rank-s-1, n)
			err := r.exchange(opAllGather, seq, asBytes(out[sb]), func(nb int) ([]byte, error) {
				var zero T
				if nb%int(unsafe.Sizeof(zero)) != 0 {
					return nil, backend.Errorf(backend.FailedPrecondition, "", "rank %d sent %d bytes, not a whole number of %T: every rank must gather the same element type", rb, nb, zero)
				}
				out[rb] = make([]T, nb/int(unsafe.Sizeof(zero)))
				return asBytes(out[rb]), nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Barrier returns once every worker of the run has called it. Failures are
// reported as for [AllReduce].
func (w *Worker) Barrier(ctx context.Context) error {
	r := w.ring
	var token [1]int64
	return r.run(ctx, opBarrier, func(seq uint32) error {
		n := r.size
		// A ring pass of empty frames, twice around: every rank has
		// heard, transitively, from every other before it returns.
		for range 2 * (n - 1) {
			if err := r.exchange(opBarrier, seq, asBytes(token[:0]), exactly(nil)); err != nil {
				return err
			}
		}
		return nil
	})
}

func mod(a, n int) int { return ((a % n) + n) % n }
