package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// An actor call's record (call, with its first run's context, run0) is
// reused for a later call once the call has ended, if no code looked at the
// call's context while it could: the code of the call's first run gets a
// callCtx, a handle on the record for one use of it, not the record itself.
//
//   - Every method of the handle, while the use it was made for is the
//     record's current one, pins the record: it is not reused, and the
//     handle stays what the context was, as if it were the record (a Done
//     channel, AfterFunc, the RuntimeInfo that ray.Runtime returns, stay
//     valid for as long as anyone holds them).
//   - When a call ends whose record is not pinned, and whose context was
//     not cancelled, the record's use ends (call.gen moves on): the
//     handle is stale, and behaves as a cancelled context with no values
//     (Err is context.Canceled, Done is closed, Value is nil). Only code
//     that first looks at the context after the call returned can see
//     that, such as a goroutine the call started.
//   - A retry's run has a record of its own, never reused, and is the
//     context itself (the first run's code may still be running).
//
// So a call whose code never looks at its context costs 16 bytes for it
// (a part of a ctxChunk) instead of the 288 of a record, which keeps the
// collector's work per call down; the records wait in Runtime.freeCalls.
type callCtx struct {
	cl  *call
	gen uint32
}

// maxFreeCalls bounds the finished call records kept for reuse (288 bytes
// each).
const maxFreeCalls = 1024

// closedDone is the Done channel of a stale call context.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ctx is the context the run's code gets: a handle on the record for the
// first run (from chunk, if not nil), the run itself for a retry.
func (r *callRun) ctx(chunk *ctxChunk) context.Context {
	cl := r.cl
	if r != &cl.run0 {
		return r
	}
	var h *callCtx
	if chunk != nil {
		h = chunk.next()
	} else {
		h = new(callCtx)
	}
	// gen changes only when the record's use ends (endUse), which is
	// after this run returns.
	h.cl, h.gen = cl, cl.gen
	return h
}

// ctxChunk hands out handles from one allocation of ctxChunkSize. A pool
// goroutine takes one from ctxChunks for the calls it runs in a row
// (callRun.run) and puts back what is left, so that a handle costs a
// 64th of an allocation. The price: a handle kept after its call keeps its
// chunk (ctxChunkSize x 16 bytes) and the records its handles point to
// from the collector.
type ctxChunk struct{ free []callCtx }

const ctxChunkSize = 64

var ctxChunks = sync.Pool{New: func() any { return new(ctxChunk) }}

func (c *ctxChunk) next() *callCtx {
	if len(c.free) == 0 {
		c.free = make([]callCtx, ctxChunkSize)
	}
	h := &c.free[0]
	c.free = c.free[1:]
	return h
}

// live returns the run h was made for and pins its record, or nil if that
// use of the record has ended.
func (h *callCtx) live() *callRun {
	r := &h.cl.run0
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.cl.gen != h.gen {
		return nil
	}
	h.cl.pinned = true
	return r
}

func (h *callCtx) Deadline() (time.Time, bool) {
	if r := h.live(); r != nil {
		return r.Deadline()
	}
	return time.Time{}, false
}

func (h *callCtx) Done() <-chan struct{} {
	if r := h.live(); r != nil {
		return r.Done()
	}
	return closedDone
}

func (h *callCtx) Err() error {
	if r := h.live(); r != nil {
		return r.Err()
	}
	return context.Canceled
}

func (h *callCtx) Value(key any) any {
	if r := h.live(); r != nil {
		return r.Value(key)
	}
	return nil
}

// AfterFunc lets context.WithCancel and friends derive from a call's
// context without a goroutine, as callRun does.
func (h *callCtx) AfterFunc(f func()) (stop func() bool) {
	if r := h.live(); r != nil {
		return r.AfterFunc(f)
	}
	go f()
	return func() bool { return false }
}

// CarriesRuntimeInfo reports whether info is the RuntimeInfo the context
// reports, without pinning the record: package ray asks, before running the
// call's method, whether it must add info to the context.
func (h *callCtx) CarriesRuntimeInfo(info *backend.RuntimeInfo) bool {
	return info == &h.cl.run0.info
}

func (h *callCtx) String() string { return "cluster.callCtx" }

// newCall returns a zero call record, reused if one is free. rt.mu must be
// held.
func (rt *Runtime) newCall() *call {
	if n := len(rt.freeCalls); n > 0 {
		cl := rt.freeCalls[n-1]
		rt.freeCalls[n-1] = nil
		rt.freeCalls = rt.freeCalls[:n-1]
		return cl
	}
	return new(call)
}

// endUse ends the use of cl's record by its first run, which has
// returned, unless the run's context was looked at or cancelled: its
// handles are stale from then on. It reports whether the record may be
// reused. rt.mu must be held. finishCall calls it before it records the
// call's result, so that code that has seen the result (a Get that
// returned) finds the handles stale already.
func (rt *Runtime) endUse(cl *call) bool {
	r := &cl.run0
	r.mu.Lock()
	defer r.mu.Unlock()
	if cl.pinned || r.cause != notCancelled || r.done != nil || r.one != nil || r.afters != nil || r.stop != nil || r.caller != nil {
		return false
	}
	cl.gen++
	return true
}

// reuseCall keeps the record of cl, whose use endUse ended and whose
// result is recorded, for a later call if there is room. rt.mu must be
// held.
func (rt *Runtime) reuseCall(cl *call) {
	if !cl.done || cl.dep != nil || len(rt.freeCalls) >= maxFreeCalls {
		return
	}
	cl.reset()
	rt.freeCalls = append(rt.freeCalls, cl)
}

// reset readies the record for its next use and drops what it holds of
// the call that used it and may be large or the user's: its object, its
// input, its actor and the actor's instance. The rest (its spec, the actor
// context and the RuntimeInfo of run0) the next use overwrites before it
// reads them (queueCall, runCall): clearing them would cost the collector's
// write barriers for nothing. run0.mu and gen stay; pinned, and the run's
// Done channel, watches, cause and caller, are zero already (endUse).
func (cl *call) reset() {
	cl.obj, cl.arg, cl.done, cl.ran = nil, backend.Value{}, false, false
	// dep and run are nil, attempt is 0 (a retry runs in a record of its
	// own, never reused), inflightIdx is set when the call starts.
	r := &cl.run0
	r.a, r.inst = nil, nil
}
