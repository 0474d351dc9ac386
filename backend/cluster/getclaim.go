package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

// A Get of a task's result may run the task itself, on the goroutine
// that would otherwise only wait for it. A started task is handed to a
// pool goroutine; until one picks it up, the attempt is unclaimed, and a
// Get that finds it so claims it (taskCtx.claim: the first of the two to
// try wins) and runs it where it is. A synchronous round trip
// (Remote, then Get) then costs no switch to another goroutine and back.
//
// What is the same as on a pool goroutine: the task was placed first (it
// holds its resources, its node's and bundle's concurrency, and is
// counted running), it runs with its own context (cancelled by the
// backend as any run is: CancelTask, node death, Close), its result,
// retries and counters go through finishTask as any attempt's do, and
// Close waits for it to return (it is counted in rt.wg).
//
// When a Get claims: only when its ctx can never end (ctx.Done() is nil,
// as for context.Background()). A Get whose ctx may end must be able to
// return then, which it could not while it ran the task; it waits as
// before. Only for tasks run by the executor's RunTask on goroutines of
// this process (no TaskStarter, which hands tasks to worker processes),
// never for an actor's creation.
//
// A panic that escapes the executor (package ray's turns panics into
// TaskFailed errors, so only another executor's can) fails the task with
// Internal before it goes on up the caller's stack.

// claimForGet returns the context of o's task's running attempt when the
// caller, a Get with a ctx that cannot end, is to run it itself; nil
// otherwise. It claims only the run handed to the pool last (the one a
// Remote just before this Get started): a Get of older work (the first of
// a thousand refs) would otherwise run on the caller what the pool
// goroutines it was handed to are about to run, and each of those woken
// for nothing would leave the pool short of idle goroutines. On success the run is counted in rt.wg. rt.mu must be held.
func (rt *Runtime) claimForGet(ctx context.Context, o *object) *taskCtx {
	if o.work != workTask || rt.starter != nil || ctx.Done() != nil || rt.closed {
		return nil
	}
	t := o.task
	if t == nil || t.state != stateRunning || t.actorOf() != nil {
		return nil
	}
	c := t.run()
	if c != rt.lastHanded || c.t != t || c.attempt != t.attempt || !c.claim() {
		return nil
	}
	rt.lastHanded = nil
	rt.wg.Add(1) // Close waits for it, as for a pool goroutine
	return c
}

// runClaimed runs the attempt c that a Get claimed, on the Get's
// goroutine, finishes it, and returns the Get's result. rt.mu must not be
// held.
func (rt *Runtime) runClaimed(ctx context.Context, c *taskCtx, id backend.ObjectID) (backend.Value, error) {
	finished := false
	defer func() {
		if !finished {
			// The executor panicked (or the goroutine is exiting): the
			// attempt ends as a failed one, then the panic goes on.
			err := backend.Errorf(backend.Internal, "task "+c.t.spec.Name, "the executor did not return (it panicked)")
			if next := rt.finishTask(c.t, c.attempt, backend.Value{}, err); next != nil {
				rt.pool.run(next)
			}
			rt.wg.Done()
		}
	}()
	for {
		v, err := rt.exec.RunTask(c, c.t.spec.Name, c.t.arg, &c.info)
		next := rt.finishTask(c.t, c.attempt, v, err)
		if next != nil && next.t == c.t && next.claim() {
			c = next // the task's retry, which the finish started: run it too
			continue
		}
		finished = true
		if next != nil {
			rt.pool.run(next) // another task the finish started: to the pool, the caller returns
		}
		break
	}
	rt.wg.Done()
	return rt.Get(ctx, id)
}
