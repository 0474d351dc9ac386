package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

var _ backend.ActorCallWaiter = (*Runtime)(nil)

// CallActorWait implements backend.ActorCallWaiter: CallActorArg, then
// Get, then Free. When the call can start at once (the actor is alive, has a
// free slot of its concurrency, and no call is queued before it), it runs
// on the caller's goroutine instead of being handed to a pool goroutine
// and its result handed back: an in-process call (the simulator's) then
// costs no goroutine switch, and a call to a worker process or pod is the
// caller's own round trip. A call that must wait is queued and waited for
// as CallActor's would be. When ctx ends first, a queued call is
// cancelled and a running one has its context cancelled (it keeps its slot
// until it returns, as CancelTask leaves it), and ctx's error is returned.
func (rt *Runtime) CallActorWait(ctx context.Context, spec *backend.CallSpec, arg backend.Arg) (backend.Value, error) {
	if err := ctx.Err(); err != nil {
		return backend.Value{}, err
	}
	if spec == nil {
		return backend.Value{}, backend.Errorf(backend.InvalidArgument, "call actor", "nil call spec")
	}
	rt.mu.Lock()
	// runCall keeps the first call that starts for this goroutine to run.
	rt.inlineCalls, rt.inlineCall = true, nil
	id, err := rt.callActorLocked(spec, arg)
	r := rt.inlineCall
	rt.inlineCalls, rt.inlineCall = false, nil
	if r != nil && (err != nil || r.cl.obj.id != id) {
		rt.pool.run(r) // another call the dispatch started first
		r = nil
	}
	rt.mu.Unlock()
	if err != nil {
		return backend.Value{}, err
	}
	defer rt.Free(id)
	if r != nil {
		v, err := r.runFor(&ctx)
		if next := rt.finishCall(r, v, err); next != nil {
			rt.pool.run(next) // the caller returns now; the next call runs on the pool
		}
		if err := ctx.Err(); err != nil {
			return backend.Value{}, err
		}
	}
	v, err := rt.Get(ctx, id)
	if err != nil && ctx.Err() != nil {
		_ = rt.CancelTask(context.WithoutCancel(ctx), id, backend.CancelOptions{})
	}
	return v, err
}
