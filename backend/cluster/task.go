package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

type taskState uint8

const (
	stateWaitingDeps taskState = iota
	stateQueued
	stateRunning
	stateDone
)

// task is a request for resources: a task, or an actor's (re)creation when
// ext.actor is set.
//
// The record is 288 bytes, a size class below what it would be with the
// fields most tasks never use (an actor's, TPU chips, a retry's context):
// those sit in ext, made only when needed.
type task struct {
	obj  *object // result (in the object table); nil for actor creation
	spec *backend.TaskSpec
	ext  *taskExt
	arg  backend.Value
	dep  *object // unresolved input
	cls  *class
	seq  uint64

	attempt int
	node    *node
	bundle  *bundle
	// nodeIdx and bundleIdx are t's places in its node's and bundle's
	// running sets (taskset.go).
	nodeIdx, bundleIdx int32
	bypass             int32 // times younger work was placed first (starvation)
	state              taskState
	// ctx0 is the storage of the first attempt's context, saving an
	// allocation; a retry allocates its own, since code of the previous
	// attempt may still hold the old one.
	ctx0 taskCtx
}

// taskExt holds what few tasks need: the actor an actor's (re)creation
// is for, the TPU chips held outside a bundle, a retry's context.
type taskExt struct {
	actor *actor
	chips uint64   // the TPU chips of node it holds outside a bundle (chips.go)
	run   *taskCtx // the running attempt's context when it is not ctx0
}

// extra returns t.ext, making it if need be.
func (t *task) extra() *taskExt {
	if t.ext == nil {
		t.ext = &taskExt{}
	}
	return t.ext
}

// actorOf returns the actor t (re)creates, or nil for a plain task.
func (t *task) actorOf() *actor {
	if t.ext == nil {
		return nil
	}
	return t.ext.actor
}

// chips returns the TPU chips t holds outside a bundle.
func (t *task) chips() uint64 {
	if t.ext == nil {
		return 0
	}
	return t.ext.chips
}

// setChips records the TPU chips t holds outside a bundle.
func (t *task) setChips(c uint64) {
	if c != 0 || t.ext != nil {
		t.extra().chips = c
	}
}

// run returns the context of t's running attempt: ctx0 for the first.
func (t *task) run() *taskCtx {
	if t.ext != nil && t.ext.run != nil {
		return t.ext.run
	}
	return &t.ctx0
}

// SubmitTask implements backend.Backend.
func (rt *Runtime) SubmitTask(ctx context.Context, spec *backend.TaskSpec) (backend.ObjectID, error) {
	var arg backend.Arg
	if spec != nil {
		arg = spec.Arg
	}
	return rt.SubmitTaskArg(ctx, spec, arg)
}

var _ backend.ArgSubmitter = (*Runtime)(nil)

// SubmitTaskArg implements backend.ArgSubmitter: the task keeps spec,
// which it never modifies, and takes its input from arg.
//
// With an executor that starts tasks elsewhere (a backend.TaskStarter: a
// worker process), a task that can start at once is started on the
// calling goroutine after the lock is released (startHere), not handed to
// a pool goroutine: a synchronous round trip (Remote, then Get) then
// costs no switch to another goroutine to send the task.
func (rt *Runtime) SubmitTaskArg(ctx context.Context, spec *backend.TaskSpec, arg backend.Arg) (backend.ObjectID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id, next, err := rt.submitTaskLocked(spec, arg)
	if next != nil {
		next.startHere()
	}
	return id, err
}

// submitTaskLocked takes rt.mu and submits the task. With a TaskStarter,
// the first task that the submission starts is returned instead of being
// handed to the pool (and counted in rt.wg: Close waits for its start),
// for the caller to start once rt.mu is released.
func (rt *Runtime) submitTaskLocked(spec *backend.TaskSpec, arg backend.Arg) (_ backend.ObjectID, next *taskCtx, _ error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.starter != nil {
		rt.inline, rt.inlineNext = true, nil
		defer func() {
			if next = rt.inlineNext; next != nil {
				rt.wg.Add(1)
			}
			rt.inline, rt.inlineNext = false, nil
		}()
	}
	id, err := rt.submitLocked(spec, arg)
	return id, nil, err
}

// submitLocked submits a task. rt.mu must be held.
func (rt *Runtime) submitLocked(spec *backend.TaskSpec, arg backend.Arg) (backend.ObjectID, error) {
	op := rt.submitOp(spec)
	if err := rt.precheck(op); err != nil {
		return 0, err
	}
	c := rt.lastSpecClass
	if spec == nil || spec != rt.lastSpec || c.swept || c.pl.Group != 0 || c.feasEpoch != rt.epoch || c.feasErr != nil {
		// Not the spec submitted last, or its class may have changed
		// (swept, or feasibility to be checked again): the full checks.
		// Names are never unregistered, so a spec checked once stays
		// registered.
		rt.lastSpec, rt.lastSpecClass = nil, nil
		if err := spec.Check(op, rt.exec); err != nil {
			return 0, err
		}
		var err error
		if c, err = rt.classFor(op, &spec.Scheduling); err != nil {
			return 0, err
		}
		if err := rt.feasible(op, c); err != nil {
			return 0, err
		}
		rt.lastSpec, rt.lastSpecClass = spec, c
	}
	t := rt.newTask()
	t.spec, t.cls, t.arg = spec, c, arg.Value
	if arg.Ref != 0 {
		dep, err := rt.lookupDep(op, arg.Ref)
		if err != nil {
			return 0, err
		}
		t.obj = rt.newTaskObject(t)
		rt.addTaskDep(t, dep)
		return t.obj.id, nil
	}
	t.obj = rt.newTaskObject(t)
	rt.enqueue(t)
	return t.obj.id, nil
}

func (rt *Runtime) addTaskDep(t *task, dep *object) {
	if dep.done {
		rt.resolveTaskDep(t, dep)
		return
	}
	t.state = stateWaitingDeps
	t.dep = dep
	dep.deps++
	dep.waits().dependents = append(dep.waits().dependents, dependent{t: t})
	rt.queued++
}

// resolveTaskDep runs when t's input is done. b.mu must be held.
func (rt *Runtime) resolveTaskDep(t *task, dep *object) {
	if t.dep != nil {
		t.dep = nil
		dep.deps--
		rt.queued--
		defer rt.maybeDelete(dep)
	}
	if t.state == stateDone {
		return
	}
	if dep.err != nil {
		t.state = stateDone
		rt.completeLocked(t.obj, backend.Value{}, dep.err)
		return
	}
	t.arg = dep.val
	rt.enqueue(t)
}

// start runs a placed request on a goroutine. b.mu must be held.
func (rt *Runtime) start(t *task) {
	if t.actorOf() != nil {
		rt.startActor(t)
		return
	}
	t.state = stateRunning
	t.node.running.add(t)
	if t.bundle != nil {
		if t.bundle.running == nil {
			t.bundle.running = &taskSet{inBundle: true}
		}
		t.bundle.running.add(t)
	}
	rt.running++
	// The context has no backend-wide parent, so starting a task does
	// not register it anywhere shared; Close cancels running tasks one by
	// one.
	var ctx *taskCtx
	if t.attempt == 0 {
		ctx = &t.ctx0
	} else {
		ctx = new(taskCtx)
		t.extra().run = ctx
	}
	ctx.b, ctx.t, ctx.attempt = rt, t, t.attempt
	rt.fillRuntimeInfo(&ctx.info, t.spec.Name, t.attempt, t.node, t.bundle, t.chips(), t.cls)
	if rt.inline && rt.inlineNext == nil {
		rt.inlineNext = ctx // finishTask's goroutine runs it next
		return
	}
	rt.lastHanded = ctx
	rt.pool.run(ctx)
}

func (rt *Runtime) runtimeInfo(name string, attempt int, n *node, bu *bundle, chips uint64, c *class) *backend.RuntimeInfo {
	info := &backend.RuntimeInfo{}
	rt.fillRuntimeInfo(info, name, attempt, n, bu, chips, c)
	return info
}

func (rt *Runtime) fillRuntimeInfo(info *backend.RuntimeInfo, name string, attempt int, n *node, bu *bundle, chips uint64, c *class) {
	var res backend.Resources
	if c != nil {
		if c.res == nil {
			c.res = rt.resourcesOf(c.demand, c.sel.slice)
		}
		res = c.res
	}
	// Fields one by one: assigning a whole struct of pointers costs write
	// barriers while the collector runs. Every field is set: the info may
	// be a reused task record's (taskreuse.go).
	info.Task, info.Attempt, info.Node, info.NodeLabels = name, attempt, n.name, n.labels
	info.Resources, info.Env = res, workEnv(n, bu, chips)
	info.Placement, info.Actor = backend.Placement{Bundle: -1}, 0
	if bu != nil {
		info.Placement = backend.Placement{Group: bu.pg.id, Bundle: bu.index}
	}
}

// newTaskObject makes t's result object. b.mu must be held.
func (rt *Runtime) newTaskObject(t *task) *object {
	o := rt.newObject()
	o.task, o.work = t, workTask
	rt.counters.submitted(workKey{name: t.spec.Name})
	return o
}

// finishTask records a task's result unless the attempt was abandoned
// (node killed, group removed, backend closed).
//
// It returns a task that the scheduling pass started, for the calling pool
// goroutine to run next itself: handing it to another goroutine would cost
// a wake-up per task.
func (rt *Runtime) finishTask(t *task, attempt int, v backend.Value, err error) (next *taskCtx) {
	return rt.finishTaskHold(t, attempt, v, err, false, false)
}

// finishTaskHold is finishTask; with hold, the wake-up of a Get waiting
// for the result is held for Flush (taskCtx.TaskDoneHeld). started says
// that the attempt was started with the executor's StartTask, whose
// contract is to let go of the context once it delivered the result: the
// record may then be reused (reuseTask).
func (rt *Runtime) finishTaskHold(t *task, attempt int, v backend.Value, err error, hold, started bool) (next *taskCtx) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t.state != stateRunning || t.attempt != attempt {
		return nil
	}
	if hold {
		rt.holdWakes = true
		defer func() { rt.holdWakes = false }()
	}
	rt.inline, rt.inlineNext = true, nil
	defer func() {
		next = rt.inlineNext
		rt.inline, rt.inlineNext = false, nil
	}()
	if err != nil {
		rt.recordFailure(t, err)
	}
	rt.stopRunning(t)
	if err != nil && t.spec.RetryOnError && backend.CodeOf(err) == backend.TaskFailed && rt.retriesLeft(t) && !rt.closed {
		t.attempt++
		rt.enqueue(t)
		return nil
	}
	t.state = stateDone
	rt.completeLocked(t.obj, v, err)
	rt.schedule()
	if started {
		rt.reuseTask(t)
	}
	return nil
}

func (rt *Runtime) retriesLeft(t *task) bool {
	return t.spec.MaxRetries < 0 || t.attempt < t.spec.MaxRetries
}

// abortTask stops a running or queued task with err, or retries it when err
// is a system failure and retries remain. b.mu must be held.
func (rt *Runtime) abortTask(t *task, err error, retry bool) {
	switch t.state {
	case stateRunning:
		t.run().cancel()
		if backend.CodeOf(err) != backend.Canceled {
			rt.recordFailure(t, err)
		}
		rt.stopRunning(t)
	case stateQueued:
		rt.unqueue(t)
	case stateDone:
		return
	}
	if retry && rt.retriesLeft(t) && !rt.closed {
		t.attempt++
		rt.enqueue(t)
		return
	}
	t.state = stateDone
	rt.completeLocked(t.obj, backend.Value{}, err)
}

// stopRunning takes a running task off its node and bundle and releases its
// resources. b.mu must be held.
func (rt *Runtime) stopRunning(t *task) {
	t.node.running.remove(t)
	if t.bundle != nil {
		t.bundle.running.remove(t)
	}
	rt.running--
	rt.release(t)
}

var _ backend.TaskCanceler = (*Runtime)(nil)

// CancelTask implements backend.TaskCanceler.
func (rt *Runtime) CancelTask(ctx context.Context, id backend.ObjectID, opts backend.CancelOptions) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck("cancel task"); err != nil {
		return err
	}
	o := rt.objects.get(id)
	if o == nil || o.work == workNone {
		return backend.Errorf(backend.NotFound, "cancel task", "%s is not the result of a live task or actor call", id)
	}
	if o.work == workCall {
		return rt.cancelCall(o.call, o.id, opts)
	}
	if o.done {
		return nil
	}
	t := o.task
	err := backend.Errorf(backend.Canceled, rt.op("task ", t.spec.Name, ""), "cancelled")
	if t.state == stateWaitingDeps {
		// Its input's completion finds it done and only drops the link.
		t.state = stateDone
		rt.completeLocked(t.obj, backend.Value{}, err)
		return nil
	}
	if opts.Force && t.state == stateRunning {
		t.run().cancelRun(true)
	}
	rt.abortTask(t, err, false)
	rt.schedule()
	return nil
}

// cancelCall cancels an actor call: a queued one is removed (the mailbox
// skips it), a running one has its context cancelled and keeps its slot
// of the actor's concurrency until it returns. Its result is Canceled at
// once either way. rt.mu must be held.
// cl is nil once the call is done (its record is dropped then).
func (rt *Runtime) cancelCall(cl *call, id backend.ObjectID, opts backend.CancelOptions) error {
	if opts.Force {
		op := "call producing " + id.String()
		if cl != nil {
			op = rt.op("call ", cl.spec.Class, cl.spec.Method)
		}
		return backend.Errorf(backend.InvalidArgument, op, "an actor call cannot be cancelled with Force, which would end the actor's worker process and every other call of the actor (as in Ray); cancel it without Force, or kill the actor with its handle's Kill")
	}
	if cl == nil || cl.done {
		return nil
	}
	op := rt.op("call ", cl.spec.Class, cl.spec.Method)
	if cl.run != nil {
		cl.run.cancel(context.Canceled)
	}
	rt.finishCallLocked(cl, backend.Value{}, backend.Errorf(backend.Canceled, op, "cancelled"))
	if a := rt.actors[cl.spec.Actor]; a != nil {
		rt.dispatchCalls(a)
	}
	return nil
}
