package cluster

import "github.com/goray-dev/goray/backend"

// A task's record (task, with its first attempt's context in it) is
// reused for a later task once nothing can reach it: this spares the
// allocation of 288 bytes per task and the collector's work for it, which
// on the path of tasks sent to worker processes is the larger part of
// what the driver allocates per task.
//
// When a record is reused: only when its one attempt was started with the
// executor's StartTask (a worker process) and finished normally through
// its TaskDone. backend.TaskStarter's contract is that the starter lets
// go of ctx, info and done once it has called done, so after that only
// the runtime holds the record, and the runtime drops its own links as
// the task finishes (its object's, its node's and bundle's running sets).
// It is not reused when code in this process may hold its context (a
// task run by RunTask: the context is the user's code's), when the
// context was cancelled, has a Done channel or a watch that was not
// stopped, or when the task was retried or created an actor.
//
// What reuse resets: reuseTask drops what the finished task holds that
// may be large or the user's (its input, its result's object); newTask
// clears the fields that the next use does not always set. The rest
// (spec, class, sequence number, state, running-set indices, the
// context's RuntimeInfo, run and attempt) the next use sets before it
// reads them: clearing them would cost the collector's write barriers for
// nothing. TestReusedTaskIsAsNew checks the fields one by one.

// maxFreeTasks bounds the finished task records kept for reuse (288 bytes
// each, so at most 288 KiB): enough for a burst of a thousand submissions
// (then a GetAll) to take every record from the last burst's.
const maxFreeTasks = 1024

// newTask returns a task record: a reused one if there is one, else a
// new one. rt.mu must be held.
func (rt *Runtime) newTask() *task {
	n := len(rt.freeTasks)
	if n == 0 {
		return new(task)
	}
	t := rt.freeTasks[n-1]
	rt.freeTasks[n-1] = nil
	rt.freeTasks = rt.freeTasks[:n-1]
	t.bypass, t.state = 0, stateWaitingDeps
	t.ctx0.claimed.Store(0)
	return t
}

// reuseTask keeps t's record for a later task if nothing but the runtime
// can reach it. finishTaskHold calls it once t is done, its first attempt
// (which StartTask started and TaskDone finished) stopped and released.
// rt.mu must be held.
func (rt *Runtime) reuseTask(t *task) {
	if t.attempt != 0 || t.ext != nil || len(rt.freeTasks) >= maxFreeTasks {
		return
	}
	c := &t.ctx0
	l := &c.lazyCancel
	l.mu.Lock()
	clean := l.cause == notCancelled && l.done == nil && l.one == nil && l.afters == nil
	l.mu.Unlock()
	if !clean {
		return
	}
	if rt.lastHanded == c {
		rt.lastHanded = nil // a Get never claims a started task's run (claimForGet)
	}
	t.obj, t.arg = nil, backend.Value{}
	rt.freeTasks = append(rt.freeTasks, t)
}
