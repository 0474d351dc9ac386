package ray

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// ObjectRef is a typed reference to a value that a task, an actor call or
// [Put] produces. Get it with [ObjectRef.Get], wait on it with [Wait], or
// pass it to another task with Task.RemoteRef.
//
// A ref is a small value, safe to copy and to use from many goroutines. The
// backend keeps the object while any copy of the ref is reachable (or a
// queued task depends on it); [ObjectRef.Release] drops it at once. Without
// Release, the object of an unreachable ref is freed by a cleanup that the
// garbage collector runs, shared by refs made together: groups of 16 refs of
// one cluster are freed together, once all of them are unreachable, so a
// long-lived ref can keep up to 15 dropped refs' objects. Release what you
// are done with when objects are large. The zero ObjectRef is invalid: Get
// returns an InvalidArgument error.
type ObjectRef[T any] struct{ s *refState }

type refState struct {
	c        *Cluster
	id       backend.ObjectID
	err      error // submission error, reported by Get
	released atomic.Bool
	slot     uint8      // id's slot in led; beside released, so a state is 48 bytes, not 56
	led      *refLedger // the cleanup that frees id (refblock.go)
}

func newRef[T any](c *Cluster, id backend.ObjectID) ObjectRef[T] {
	return ObjectRef[T]{s: c.refs.newState(c, id)}
}

func errRef[T any](c *Cluster, err error) ObjectRef[T] {
	return ObjectRef[T]{s: &refState{c: c, err: err}}
}

// ID returns the backend's object ID, or 0 for a ref whose submission failed.
func (r ObjectRef[T]) ID() ObjectID {
	if r.s == nil {
		return 0
	}
	return r.s.id
}

// Err returns the submission error of the work behind the ref, without
// waiting for the work: an invalid argument, an unregistered name, an
// infeasible request, a closed cluster. Errors of the work itself are
// reported by Get.
func (r ObjectRef[T]) Err() error {
	if r.s == nil {
		return backend.Errorf(backend.InvalidArgument, "use object ref", "zero ObjectRef")
	}
	if r.s.released.Load() {
		return backend.Errorf(backend.FailedPrecondition, "use object ref", "ref %s was released", r.s.id)
	}
	return r.s.err
}

func (r ObjectRef[T]) String() string {
	if r.s == nil || r.s.err != nil {
		return "ObjectRef(invalid)"
	}
	return fmt.Sprintf("ObjectRef[%T](%s)", *new(T), r.s.id)
}

// Get waits for the value and returns it, or the error of the work that
// produces it: the submission error, a TaskFailed error carrying a
// *TaskError, Unavailable after retries ran out, ctx.Err() when ctx ends.
//
// With a ctx that can never end (context.Background()), Get of a task
// that runs in this process and has not yet been picked up by one of the
// backend's goroutines may run the task on the calling goroutine instead
// of waiting for it (docs/runtime.md, "A Get may run the task itself");
// the task keeps its own context, resources and retries.
func (r ObjectRef[T]) Get(ctx context.Context) (T, error) {
	var zero T
	if ctx == nil {
		return zero, backend.Errorf(backend.InvalidArgument, "get object", "nil context; pass context.Background() or a request's context")
	}
	if err := r.Err(); err != nil {
		return zero, err
	}
	c := r.s.c
	if err := c.checkCtx(ctx, "get object"); err != nil {
		return zero, err
	}
	v, err := c.b.Get(ctx, r.s.id)
	runtime.KeepAlive(r.s)
	if err != nil {
		return zero, err
	}
	out, err := decode[T](c.codec, v)
	if err != nil {
		return zero, backend.Errorf(backend.InvalidArgument, "get object "+r.s.id.String(), "%w", err)
	}
	return out, nil
}

// Release drops this ref's hold on the object now instead of when the ref
// becomes unreachable. Every copy of the ref becomes unusable: Get then fails
// with FailedPrecondition. Release is idempotent.
func (r ObjectRef[T]) Release() {
	if r.s == nil || r.s.err != nil || r.s.released.Swap(true) {
		return
	}
	r.s.forget()
	r.s.c.b.Free(r.s.id)
}

// Cancel stops the task or actor method call whose result r is, as Ray's
// ray.cancel does: work still waiting for its arguments, for resources or
// in the actor's queue is removed; running work has its context cancelled
// (code that returns when its context ends stops there; code that ignores
// it finishes, and its result is dropped), and it is not retried. Get then
// fails with Canceled. Work that already finished keeps its result;
// cancelling it does nothing. A running call keeps its place in the
// actor's concurrency until it returns.
//
// With [Force], a running task's worker process is ended, for code that
// ignores its context: the task's Get fails with Canceled, other work in
// that process fails as after a crash (retried per its options; actors
// restart per theirs), and the backend starts a new worker process. On
// the in-process simulator, which cannot end a goroutine, Force cancels
// as without it. Force on an actor call is InvalidArgument (as in Ray:
// it would end the actor; use the handle's Kill).
//
// A ref from Put, or a backend that cannot cancel
// (backend.TaskCanceler), gives an error: InvalidArgument or
// Unimplemented.
func (r ObjectRef[T]) Cancel(ctx context.Context, opts ...CancelOption) error {
	const op = "cancel task"
	if r.s == nil {
		return backend.Errorf(backend.InvalidArgument, op, "the zero ObjectRef has no task")
	}
	if r.s.err != nil {
		return r.s.err
	}
	tc, ok := r.s.c.b.(backend.TaskCanceler)
	if !ok {
		return backend.Errorf(backend.Unimplemented, op, "backend %T cannot cancel tasks", r.s.c.b)
	}
	var o backend.CancelOptions
	for _, opt := range opts {
		if opt != nil {
			opt.applyCancel(&o)
		}
	}
	err := tc.CancelTask(ctx, r.s.id, o)
	if backend.CodeOf(err) == backend.NotFound {
		return backend.Errorf(backend.InvalidArgument, op, "object %s is not the result of a task or actor call (a value from Put, or a released ref): %w", r.s.id, err)
	}
	return err
}

// CancelOption configures [ObjectRef.Cancel]; [Force] is one. It is an
// interface of typed values, as [TaskOption] and [ActorOption] are (one
// style for per-call options; a nil option is ignored).
type CancelOption interface{ applyCancel(*backend.CancelOptions) }

type forceOption struct{}

func (forceOption) applyCancel(o *backend.CancelOptions) { o.Force = true }

// Force makes [ObjectRef.Cancel] end the worker process that runs the
// task, as Ray's ray.cancel(ref, force=True).
func Force() CancelOption { return forceOption{} }

// Ref is any object ref, whatever its type; [Wait] takes refs of mixed types
// through it.
type Ref interface {
	ID() backend.ObjectID
	Err() error
	cluster() *Cluster
}

func (r ObjectRef[T]) cluster() *Cluster {
	if r.s == nil {
		return nil
	}
	return r.s.c
}

// Put stores v in the cluster's object store and returns a ref to it. An
// error (a value the codec cannot encode, a closed cluster) is reported by
// the ref's Get and Err.
func Put[T any](ctx context.Context, c *Cluster, v T) ObjectRef[T] {
	if err := c.checkCtx(ctx, "put object"); err != nil {
		return errRef[T](c, err)
	}
	val, err := encode(c.codec, v)
	if err != nil {
		return errRef[T](c, backend.Errorf(backend.InvalidArgument, "put object", "%w", err))
	}
	id, err := c.b.Put(ctx, val)
	if err != nil {
		return errRef[T](c, err)
	}
	return newRef[T](c, id)
}

// Wait blocks until n of refs are ready (their work finished, well or not)
// or ctx ends, and splits refs into ready and not ready, each in input
// order. When ctx ends first it returns the split so far and ctx.Err(). A ref
// whose submission failed counts as ready. n is clamped to [0, len(refs)].
func Wait[R Ref](ctx context.Context, refs []R, n int) (ready, notReady []R, err error) {
	if ctx == nil {
		return nil, nil, backend.Errorf(backend.InvalidArgument, "wait for objects", "nil context; pass context.Background() or a request's context")
	}
	n = max(0, min(n, len(refs)))
	var c *Cluster
	ids := make([]backend.ObjectID, 0, len(refs))
	idx := make([]int, 0, len(refs))
	done := make([]bool, len(refs))
	count := 0
	for i, r := range refs {
		if r.Err() != nil {
			done[i] = true
			count++
			continue
		}
		if c == nil {
			c = r.cluster()
		} else if r.cluster() != c {
			return nil, nil, backend.Errorf(backend.InvalidArgument, "wait for objects", "refs belong to different clusters")
		}
		ids = append(ids, r.ID())
		idx = append(idx, i)
	}
	if len(ids) > 0 && count < n {
		if err := c.check("wait for objects"); err != nil {
			return nil, nil, err
		}
		var rs []bool
		rs, err = c.b.Wait(ctx, ids, n-count)
		for j, ok := range rs {
			if ok {
				done[idx[j]] = true
			}
		}
	}
	runtime.KeepAlive(refs)
	for i, r := range refs {
		if done[i] {
			ready = append(ready, r)
		} else {
			notReady = append(notReady, r)
		}
	}
	return ready, notReady, err
}

// GetAll waits for every ref and returns their values in order. It fails
// with the first error in input order, naming the failing index.
func GetAll[T any](ctx context.Context, refs []ObjectRef[T]) ([]T, error) {
	if ctx == nil {
		return nil, backend.Errorf(backend.InvalidArgument, "get objects", "nil context; pass context.Background() or a request's context")
	}
	waitAll(ctx, refs)
	out := make([]T, len(refs))
	for i, r := range refs {
		v, err := r.Get(ctx)
		if err != nil {
			if ctx.Err() != nil && err == ctx.Err() {
				return nil, err
			}
			return nil, fmt.Errorf("get objects: ref %d of %d: %w", i, len(refs), err)
		}
		out[i] = v
	}
	return out, nil
}

// waitAll waits, when the backend can (backend.AllWaiter), for the
// objects of refs up to the first ref that is invalid or of another
// cluster, with one wake-up, before GetAll gets them one by one: a
// thousand results that arrive in bursts then wake GetAll once, not once
// per burst. The Gets that follow report every outcome as they would
// have without it.
func waitAll[T any](ctx context.Context, refs []ObjectRef[T]) {
	if len(refs) < 2 || refs[0].s == nil {
		return
	}
	c := refs[0].s.c
	if c.check("get objects") != nil {
		return
	}
	w, ok := c.b.(backend.AllWaiter)
	if !ok {
		return
	}
	buf := waitIDs.Get().(*[]backend.ObjectID)
	ids := (*buf)[:0]
	for _, r := range refs {
		if r.Err() != nil || r.s.c != c {
			break
		}
		ids = append(ids, r.s.id)
	}
	if len(ids) > 1 {
		w.WaitAll(ctx, ids)
	}
	runtime.KeepAlive(refs)
	if cap(ids) <= maxPooledIDs {
		*buf = ids[:0]
		waitIDs.Put(buf)
	}
}

// waitIDs holds the ID slices of waitAll (a WaitAll keeps none), so that a
// GetAll costs no allocation for them; maxPooledIDs bounds what is kept.
var waitIDs = sync.Pool{New: func() any { return new([]backend.ObjectID) }}

const maxPooledIDs = 1 << 16
