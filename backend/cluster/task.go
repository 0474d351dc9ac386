package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

type taskState uint8

const (
	stateWaitingDeps taskState = iota
	stateQueued
	stateRunning
	stateDone
)

// task is a request for resources: a task, or an actor's (re)creation when
// actor is set.
type task struct {
	obj     *object // result; nil for actor creation
	objData object  // storage of obj, saving an allocation
	spec    *backend.TaskSpec
	actor   *actor
	arg     backend.Value
	dep     *object // unresolved input
	cls     *class
	seq     uint64

	attempt int
	node    *node
	bundle  *bundle
	run     *taskCtx // the running attempt
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

// SubmitTask implements backend.Backend.
func (b *Runtime) SubmitTask(ctx context.Context, spec *backend.TaskSpec) (backend.ObjectID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	op := b.submitOp(spec)
	if err := b.precheck(op); err != nil {
		return 0, err
	}
	if err := spec.Check(op, b.exec); err != nil {
		return 0, err
	}
	c, err := b.classFor(op, &spec.Scheduling)
	if err != nil {
		return 0, err
	}
	if err := b.feasible(op, c); err != nil {
		return 0, err
	}
	t := &task{spec: spec, cls: c, arg: spec.Arg.Value}
	if spec.Arg.Ref != 0 {
		dep, err := b.lookupDep(op, spec.Arg.Ref)
		if err != nil {
			return 0, err
		}
		t.obj = b.newTaskObject(t)
		b.addTaskDep(t, dep)
		return t.obj.id, nil
	}
	t.obj = b.newTaskObject(t)
	b.enqueue(t)
	return t.obj.id, nil
}

func (b *Runtime) addTaskDep(t *task, dep *object) {
	if dep.done {
		b.resolveTaskDep(t, dep)
		return
	}
	t.state = stateWaitingDeps
	t.dep = dep
	dep.deps++
	dep.waits().dependents = append(dep.waits().dependents, dependent{t: t})
	b.queued++
}

// resolveTaskDep runs when t's input is done. b.mu must be held.
func (b *Runtime) resolveTaskDep(t *task, dep *object) {
	if t.dep != nil {
		t.dep = nil
		dep.deps--
		b.queued--
		defer b.maybeDelete(dep)
	}
	if t.state == stateDone {
		return
	}
	if dep.err != nil {
		t.state = stateDone
		b.completeLocked(t.obj, backend.Value{}, dep.err)
		return
	}
	t.arg = dep.val
	b.enqueue(t)
}

// start runs a placed request on a goroutine. b.mu must be held.
func (b *Runtime) start(t *task) {
	if t.actor != nil {
		b.startActor(t)
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
	b.running++
	// The context has no backend-wide parent, so starting a task does
	// not register it anywhere shared; Close cancels running tasks one by
	// one.
	var ctx *taskCtx
	if t.attempt == 0 {
		ctx = &t.ctx0
	} else {
		ctx = new(taskCtx)
	}
	ctx.b, ctx.t, ctx.attempt = b, t, t.attempt
	b.fillRuntimeInfo(&ctx.info, t.spec.Name, t.attempt, t.node, t.bundle, t.cls)
	t.run = ctx
	if b.inline && b.inlineNext == nil {
		b.inlineNext = ctx // finishTask's goroutine runs it next
		return
	}
	b.pool.run(ctx)
}

func (b *Runtime) runtimeInfo(name string, attempt int, n *node, bu *bundle, c *class) *backend.RuntimeInfo {
	info := &backend.RuntimeInfo{}
	b.fillRuntimeInfo(info, name, attempt, n, bu, c)
	return info
}

func (b *Runtime) fillRuntimeInfo(info *backend.RuntimeInfo, name string, attempt int, n *node, bu *bundle, c *class) {
	var res backend.Resources
	if c != nil {
		if c.res == nil {
			c.res = b.resources(c.demand)
		}
		res = c.res
	}
	*info = backend.RuntimeInfo{
		Task: name, Attempt: attempt, Node: n.name, NodeLabels: n.labels,
		Resources: res, Env: n.env,
		Placement: backend.Placement{Bundle: -1},
	}
	if bu != nil {
		info.Placement = backend.Placement{Group: bu.pg.id, Bundle: bu.index}
		info.Env = admission.OverlayEnv(n.env, bu.env)
	}
}

// newTaskObject makes t's result object inside t. b.mu must be held.
func (b *Runtime) newTaskObject(t *task) *object {
	o := &t.objData
	*o = object{id: backend.ObjectID(b.newID()), owner: true, task: t}
	b.objects.put(o)
	return o
}

// finishTask records a task's result unless the attempt was abandoned
// (node killed, group removed, backend closed).
//
// It returns a task that the scheduling pass started, for the calling pool
// goroutine to run next itself: handing it to another goroutine would cost
// a wake-up per task.
func (b *Runtime) finishTask(t *task, attempt int, v backend.Value, err error) (next *taskCtx) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.state != stateRunning || t.attempt != attempt {
		return nil
	}
	b.inline, b.inlineNext = true, nil
	defer func() {
		next = b.inlineNext
		b.inline, b.inlineNext = false, nil
	}()
	if err != nil {
		b.recordFailure(t, err)
	}
	b.stopRunning(t)
	if err != nil && t.spec.RetryOnError && backend.CodeOf(err) == backend.TaskFailed && b.retriesLeft(t) && !b.closed {
		t.attempt++
		b.enqueue(t)
		return nil
	}
	t.state = stateDone
	b.completeLocked(t.obj, v, err)
	b.schedule()
	return nil
}

func (b *Runtime) retriesLeft(t *task) bool {
	return t.spec.MaxRetries < 0 || t.attempt < t.spec.MaxRetries
}

// abortTask stops a running or queued task with err, or retries it when err
// is a system failure and retries remain. b.mu must be held.
func (b *Runtime) abortTask(t *task, err error, retry bool) {
	switch t.state {
	case stateRunning:
		t.run.cancel()
		if backend.CodeOf(err) != backend.Canceled {
			b.recordFailure(t, err)
		}
		b.stopRunning(t)
	case stateQueued:
		b.unqueue(t)
	case stateDone:
		return
	}
	if retry && b.retriesLeft(t) && !b.closed {
		t.attempt++
		b.enqueue(t)
		return
	}
	t.state = stateDone
	b.completeLocked(t.obj, backend.Value{}, err)
}

// stopRunning takes a running task off its node and bundle and releases its
// resources. b.mu must be held.
func (b *Runtime) stopRunning(t *task) {
	t.node.running.remove(t)
	if t.bundle != nil {
		t.bundle.running.remove(t)
	}
	b.running--
	b.release(t)
}

var _ backend.TaskCanceler = (*Runtime)(nil)

// CancelTask implements backend.TaskCanceler.
func (b *Runtime) CancelTask(ctx context.Context, id backend.ObjectID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.precheck("cancel task"); err != nil {
		return err
	}
	o := b.objects.get(id)
	if o == nil || o.task == nil {
		return backend.Errorf(backend.NotFound, "cancel task", "%s is not the result of a live task", id)
	}
	if o.done {
		return nil
	}
	t := o.task
	err := backend.Errorf(backend.Canceled, b.op("task ", t.spec.Name, ""), "cancelled")
	if t.state == stateWaitingDeps {
		// Its input's completion finds it done and only drops the link.
		t.state = stateDone
		b.completeLocked(t.obj, backend.Value{}, err)
		return nil
	}
	b.abortTask(t, err, false)
	b.schedule()
	return nil
}
