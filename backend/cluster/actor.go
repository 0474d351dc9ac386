package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

type actorState int

const (
	actorPending actorState = iota
	actorAlive
	actorRestarting
	actorDead
)

var actorStateNames = [...]string{"PENDING", "ALIVE", "RESTARTING", "DEAD"}

type actor struct {
	rt       *Runtime
	id       backend.ActorID
	spec     *backend.ActorSpec
	state    actorState
	creation *task
	node     *node
	bundle   *bundle
	inst     backend.ActorInstance
	restarts int
	gen      int // incarnation, bumped at every (re)start
	ctx      context.Context
	cancel   context.CancelFunc
	env      map[string]string // of this incarnation's work: its node's, bundle's and chips'
	deathErr error

	ready     chan struct{}
	readyShut bool
	mailbox   []*call
	head      int
	// inflight are the running calls, each at its call.inflightIdx
	// (removal swaps the last into the hole: no hashing per call).
	inflight   []*call
	concurrent int
	// side holds the queued calls that run beside the others
	// (CallSpec.Beside); besideN counts those of inflight.
	side    []*call
	besideN int
	// names are the names of the method called last (CallActor).
	names methodNames
}

type call struct {
	obj     *object
	spec    *backend.CallSpec
	arg     backend.Value
	dep     *object
	run     *callRun // while it runs
	attempt int32
	// inflightIdx is the call's place in its actor's inflight while it
	// runs (the slot holds the call itself only then).
	inflightIdx int32
	done        bool
	ran         bool // run0 is in use
	// pinned and gen, guarded by run0.mu, decide whether the record may
	// be reused once the call ends (callctx.go): gen numbers the record's
	// uses, and pinned is set once the code of the use numbered gen
	// looked at its context.
	pinned bool
	gen    uint32
	run0   callRun // the first run, saving an allocation
}

func (a *actor) signalReady() {
	if !a.readyShut {
		a.readyShut = true
		close(a.ready)
	}
}

// liveActor reports the live actor named name. b.mu must be held.
func (rt *Runtime) liveActor(name string) (backend.ActorID, bool) {
	other := rt.actorNames[name]
	if other == nil || other.state == actorDead {
		return 0, false
	}
	return other.id, true
}

// CreateActor implements backend.Backend.
func (rt *Runtime) CreateActor(ctx context.Context, spec *backend.ActorSpec) (backend.ActorID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if spec == nil {
		return 0, (*backend.ActorSpec)(nil).Check("create actor", rt.exec, nil)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	op := rt.op("create actor ", spec.Class, "")
	if err := rt.precheck(op); err != nil {
		return 0, err
	}
	if err := spec.Check(op, rt.exec, rt.liveActor); err != nil {
		return 0, err
	}
	c, err := rt.classFor(op, &spec.Scheduling)
	if err != nil {
		return 0, err
	}
	if err := rt.feasible(op, c); err != nil {
		return 0, err
	}
	a := &actor{
		rt: rt, id: backend.ActorID(rt.newID()), spec: spec, ready: make(chan struct{}),
		concurrent: max(1, spec.MaxConcurrency),
	}
	rt.actors[a.id] = a
	if spec.Name != "" {
		rt.actorNames[spec.Name] = a
	}
	a.creation = &task{ext: &taskExt{actor: a}, cls: c, arg: spec.Arg.Value}
	rt.enqueue(a.creation)
	return a.id, nil
}

// startActor runs an actor's constructor on its placed node. b.mu must be
// held.
func (rt *Runtime) startActor(t *task) {
	a := t.actorOf()
	t.state = stateRunning
	a.node, a.bundle = t.node, t.bundle
	a.node.addActor(a)
	if a.bundle != nil {
		if a.bundle.actors == nil {
			a.bundle.actors = map[*actor]struct{}{}
		}
		a.bundle.actors[a] = struct{}{}
	}
	a.gen++
	gen := a.gen
	a.ctx, a.cancel = context.WithCancel(context.Background())
	info := rt.runtimeInfo(a.spec.Class, a.restarts, a.node, a.bundle, t.chips(), t.cls)
	a.env = info.Env
	info.Actor = a.id
	ctx := a.ctx
	rt.pool.run(funcRunner(func() {
		inst, err := rt.exec.NewActor(ctx, a.spec.Class, t.arg, info)
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if a.gen != gen || a.state == actorDead {
			return
		}
		if err != nil {
			rt.killActorLocked(a, backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "constructor of %s failed: %w", a.spec.Class, err), false)
			return
		}
		a.inst = inst
		a.state = actorAlive
		a.signalReady()
		rt.dispatchCalls(a)
	}))
}

// ActorReady implements backend.Backend.
func (rt *Runtime) ActorReady(ctx context.Context, id backend.ActorID) error {
	rt.mu.Lock()
	a := rt.actors[id]
	if err := rt.precheck("wait for actor"); err != nil {
		rt.mu.Unlock()
		return err
	}
	if a == nil {
		defer rt.mu.Unlock()
		if err, dead := rt.deadActor(id); dead {
			return err
		}
		return backend.Errorf(backend.NotFound, "wait for actor", "actor %s does not exist", id)
	}
	ch := a.ready
	rt.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return backend.Errorf(backend.FailedPrecondition, "wait for actor", "%w", backend.ErrClosed)
	}
	return a.deathErr
}

// NamedActor implements backend.Backend.
func (rt *Runtime) NamedActor(ctx context.Context, name string) (backend.ActorID, string, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck("look up actor " + name); err != nil {
		return 0, "", err
	}
	a := rt.actorNames[name]
	if a == nil || a.state == actorDead {
		return 0, "", backend.Errorf(backend.NotFound, "look up actor "+name, "no live actor is named %q", name)
	}
	return a.id, a.spec.Class, nil
}

// CallActor implements backend.Backend.
func (rt *Runtime) CallActor(ctx context.Context, spec *backend.CallSpec) (backend.ObjectID, error) {
	var arg backend.Arg
	if spec != nil {
		arg = spec.Arg
	}
	return rt.CallActorArg(ctx, spec, arg)
}

var _ backend.CallArgSubmitter = (*Runtime)(nil)

// CallActorArg implements backend.CallArgSubmitter: the call keeps spec,
// which it never modifies, and takes its input from arg.
func (rt *Runtime) CallActorArg(ctx context.Context, spec *backend.CallSpec, arg backend.Arg) (backend.ObjectID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if spec == nil {
		return 0, backend.Errorf(backend.InvalidArgument, "call actor", "nil call spec")
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.callActorLocked(spec, arg)
}

// callActorLocked is CallActorArg with rt.mu held.
func (rt *Runtime) callActorLocked(spec *backend.CallSpec, arg backend.Arg) (backend.ObjectID, error) {
	a := rt.actors[spec.Actor]
	if a != nil && spec.Method != "" && a.names.method == spec.Method && a.spec.Class == spec.Class && !rt.closed && rt.started {
		// A call of the method called last: the checks below passed for
		// it, and its names are at hand.
		return rt.queueCall(a, spec, arg, a.names.op)
	}
	op := rt.op("call ", spec.Class, spec.Method)
	if err := rt.precheck(op); err != nil {
		return 0, err
	}
	if spec.Method == "" {
		return 0, backend.Errorf(backend.InvalidArgument, op, "empty method name")
	}
	if a == nil {
		if err, dead := rt.deadActor(spec.Actor); dead {
			o := rt.newObject()
			rt.completeLocked(o, backend.Value{}, backend.Errorf(backend.ActorDied, "call "+spec.Method, "%w", err))
			return o.id, nil
		}
		return 0, backend.Errorf(backend.NotFound, op, "actor %s does not exist", spec.Actor)
	}
	if a.spec.Class != spec.Class {
		return 0, backend.Errorf(backend.NotFound, op, "actor %s is of class %q; method %s.%s cannot be called on it", spec.Actor, a.spec.Class, spec.Class, spec.Method)
	}
	if !rt.exec.HasActorMethod(spec.Class, spec.Method) {
		return 0, backend.Errorf(backend.NotFound, op, "method %q of actor class %q is not registered", spec.Method, spec.Class)
	}
	// Registered methods stay registered: the next calls of this method
	// skip the checks.
	a.names = methodNames{method: spec.Method, op: op, task: rt.op("", a.spec.Class, spec.Method)}
	return rt.queueCall(a, spec, arg, op)
}

// methodNames are an actor's names for the method called last, kept for
// the next calls (calls come in runs of one method).
type methodNames struct {
	method string
	op     string // "call Class.method", for errors
	task   string // "Class.method", the calls' RuntimeInfo.Task
}

// queueCall makes a checked call of a live or dead actor and queues it.
// rt.mu must be held.
func (rt *Runtime) queueCall(a *actor, spec *backend.CallSpec, arg backend.Arg, op string) (backend.ObjectID, error) {
	cl := rt.newCall()
	cl.obj, cl.spec, cl.arg = rt.newObject(), spec, arg.Value
	cl.obj.call, cl.obj.work = cl, workCall
	if a.state == actorDead {
		rt.counters.submitted(workKey{name: spec.Class, method: spec.Method})
		rt.completeLocked(cl.obj, backend.Value{}, callDeathErr(a, cl))
		return cl.obj.id, nil
	}
	if arg.Ref != 0 {
		dep, err := rt.lookupDep(op, arg.Ref)
		if err != nil {
			rt.objects.del(cl.obj.id)
			return 0, err
		}
		rt.counters.submitted(workKey{name: spec.Class, method: spec.Method})
		if !dep.done {
			cl.dep = dep
			dep.deps++
			dep.waits().dependents = append(dep.waits().dependents, dependent{c: cl})
		} else if dep.err != nil {
			rt.completeLocked(cl.obj, backend.Value{}, dep.err)
			return cl.obj.id, nil
		} else {
			cl.arg = dep.val
		}
	}
	if arg.Ref == 0 {
		rt.counters.submitted(workKey{name: spec.Class, method: spec.Method})
	}
	if spec.Beside {
		a.side = append(a.side, cl)
	} else {
		a.mailbox = append(a.mailbox, cl)
	}
	rt.queued++
	rt.dispatchCalls(a)
	return cl.obj.id, nil
}

// resolveCallDep runs when a call's input is done. b.mu must be held.
func (rt *Runtime) resolveCallDep(cl *call, dep *object) {
	cl.dep = nil
	dep.deps--
	defer rt.maybeDelete(dep)
	if cl.done {
		return
	}
	if dep.err != nil {
		cl.arg = backend.Value{}
		rt.finishCallLocked(cl, backend.Value{}, dep.err)
		// leave it in the mailbox; dispatch skips done calls
	} else {
		cl.arg = dep.val
	}
	if a := rt.actors[cl.spec.Actor]; a != nil {
		rt.dispatchCalls(a)
	}
}

func (rt *Runtime) finishCallLocked(cl *call, v backend.Value, err error) {
	if cl.done {
		return
	}
	cl.done = true
	rt.completeLocked(cl.obj, v, err)
}

// dispatchCalls starts mailbox calls in order while the actor has capacity.
// A call whose input is not ready holds back the calls behind it, keeping
// submission order. b.mu must be held.
func (rt *Runtime) dispatchCalls(a *actor) {
	if a.state == actorAlive && len(a.side) > 0 {
		keep := a.side[:0]
		for _, cl := range a.side {
			switch {
			case cl.done:
				rt.queued--
			case cl.dep != nil:
				keep = append(keep, cl)
			default:
				rt.queued--
				a.besideN++
				rt.runCall(a, cl)
			}
		}
		clear(a.side[len(keep):])
		a.side = keep
	}
	for a.state == actorAlive && a.head < len(a.mailbox) && len(a.inflight)-a.besideN < a.concurrent {
		cl := a.mailbox[a.head]
		if cl.done {
			rt.popCall(a)
			continue
		}
		if cl.dep != nil {
			return
		}
		rt.popCall(a)
		rt.runCall(a, cl)
	}
}

func (rt *Runtime) popCall(a *actor) {
	a.mailbox[a.head] = nil
	a.head++
	rt.queued--
	if a.head == len(a.mailbox) {
		a.mailbox, a.head = a.mailbox[:0], 0
	}
}

// running reports whether cl is one of a's running calls.
func (a *actor) running(cl *call) bool {
	i := int(cl.inflightIdx)
	return i < len(a.inflight) && a.inflight[i] == cl
}

// stopCall takes the running call cl out of a.inflight.
func (a *actor) stopCall(cl *call) {
	i, last := int(cl.inflightIdx), len(a.inflight)-1
	if i != last {
		a.inflight[i] = a.inflight[last]
		a.inflight[i].inflightIdx = int32(i)
	}
	a.inflight[last] = nil
	a.inflight = a.inflight[:last]
}

func (rt *Runtime) runCall(a *actor, cl *call) {
	cl.inflightIdx = int32(len(a.inflight))
	a.inflight = append(a.inflight, cl)
	c := a.creation.cls
	if c.res == nil {
		c.res = rt.resourcesOf(c.demand, c.sel.slice)
	}
	// The first run's context is stored in the call; a retry's is its
	// own, since code of the previous run may still hold the old one.
	var r *callRun
	if !cl.ran {
		cl.ran = true
		r = &cl.run0
	} else {
		r = new(callRun)
	}
	// Fields one by one, on zero memory: assigning whole structs of
	// pointers costs write barriers while the collector runs.
	r.Context, r.a, r.cl, r.inst = a.ctx, a, cl, a.inst
	cl.run = r
	task := a.names.task
	if a.names.method != cl.spec.Method {
		task = rt.op("", a.spec.Class, cl.spec.Method)
	}
	in := &r.info
	in.Task, in.Attempt, in.Node = task, int(cl.attempt), a.node.name
	in.NodeLabels, in.Env, in.Actor, in.Resources = a.node.labels, a.env, a.id, c.res
	in.Placement = backend.Placement{Bundle: -1} // every field set: the record may be reused
	if a.bundle != nil {
		in.Placement = backend.Placement{Group: a.bundle.pg.id, Bundle: a.bundle.index}
	}
	rt.running++
	if rt.inlineCalls && rt.inlineCall == nil {
		rt.inlineCall = r // the finishing call's goroutine runs it next
		return
	}
	rt.pool.run(r)
}

// callRun is one actor call on its way through a pool goroutine. It is
// also the call's context: the actor incarnation's context (Context), plus
// the call's RuntimeInfo and its own cancellation (CancelTask), in one
// allocation. Like taskCtx, it makes its Done channel, and watches the
// actor's context, only if the code asks for them. The first run's code
// gets it through a callCtx handle, so that its record can be reused
// (callctx.go).
type callRun struct {
	context.Context
	info backend.RuntimeInfo
	a    *actor
	cl   *call
	inst backend.ActorInstance

	lazyCancel             // the call's own cancellation
	stop       func() bool // stops watching the actor's context (and caller's); guarded by mu
	// caller, while the call runs on its caller's goroutine
	// (CallActorWait), is the caller's context, which ends the call's
	// too: followed lazily (Err asks it; Done and AfterFunc watch it),
	// so that a call whose code never looks costs no watch. A pointer:
	// the call record's size is budgeted (TestTaskRecordSize). Guarded
	// by mu.
	caller *context.Context
}

func (r *callRun) Value(key any) any {
	if key == any(backend.RuntimeInfoKey{}) {
		return &r.info
	}
	return r.Context.Value(key)
}

func (r *callRun) Err() error {
	r.mu.Lock()
	err, caller := r.cause.err(), r.caller
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if caller != nil && (*caller).Err() != nil {
		r.cancel(context.Canceled)
		r.mu.Lock()
		err = r.cause.err()
		r.mu.Unlock()
		return err
	}
	return r.Context.Err()
}

// watchLocked makes the call's context follow the actor's, and its
// caller's while it runs on the caller's goroutine. r.mu must be held.
func (r *callRun) watchLocked() {
	if r.stop == nil && r.cause == notCancelled {
		stop := context.AfterFunc(r.Context, func() { r.cancel(r.Context.Err()) })
		if c := r.caller; c != nil {
			stopCaller := context.AfterFunc(*c, func() { r.cancel(context.Canceled) })
			r.stop = func() bool { a, b := stop(), stopCaller(); return a || b }
			return
		}
		r.stop = stop
	}
}

// runFor runs the call on its caller's goroutine (CallActorWait), its
// context ending with ctx, then stops watching both.
func (r *callRun) runFor(ctx *context.Context) (backend.Value, error) {
	r.mu.Lock()
	r.caller = ctx
	r.mu.Unlock()
	v, err := r.inst.Call(r.ctx(nil), r.cl.spec.Method, r.cl.arg, &r.info)
	r.mu.Lock()
	r.caller = nil
	r.mu.Unlock()
	r.finished()
	return v, err
}

func (r *callRun) Done() <-chan struct{} { return r.doneChan(r.watchLocked) }

// AfterFunc lets context.WithCancel and friends derive from a callRun
// without starting a goroutine (the context package looks for it).
func (r *callRun) AfterFunc(f func()) (stop func() bool) { return r.afterFunc(f, r.watchLocked) }

// cancel ends the call's context with err (context.Canceled, or the
// actor's context's error).
func (r *callRun) cancel(err error) { r.cancelWith(err, nil) }

// finished stops watching the actor's context once the call returned.
func (r *callRun) finished() {
	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// run runs the call, then, on the same goroutine, the calls that finishing
// it lets start.
func (r *callRun) run() {
	chunk := ctxChunks.Get().(*ctxChunk)
	for r != nil {
		v, err := r.inst.Call(r.ctx(chunk), r.cl.spec.Method, r.cl.arg, &r.info)
		r.finished()
		r = r.a.rt.finishCall(r, v, err)
	}
	ctxChunks.Put(chunk)
}

// finishCall records a call's result unless its incarnation is gone (or
// the call was started again in a later one: it is running, but not as r),
// and returns a call of the same actor to run next on this goroutine.
func (rt *Runtime) finishCall(r *callRun, v backend.Value, err error) (next *callRun) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	a, cl := r.a, r.cl
	if !a.running(cl) || cl.run != r {
		return nil
	}
	a.stopCall(cl)
	cl.run = nil
	if cl.spec.Beside {
		a.besideN--
	}
	rt.running--
	if err != nil {
		rt.failures.Add(admission.NewTaskFailure(r.info.Task, r.info.Attempt, r.info.Node, err))
	}
	rt.inlineCalls, rt.inlineCall = true, nil
	reuse := r == &cl.run0 && rt.endUse(cl)
	rt.finishCallLocked(cl, v, err)
	if reuse {
		rt.reuseCall(cl)
	}
	rt.dispatchCalls(a)
	next = rt.inlineCall
	rt.inlineCalls, rt.inlineCall = false, nil
	return next
}

// KillActor implements backend.Backend.
func (rt *Runtime) KillActor(ctx context.Context, id backend.ActorID) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err := rt.precheck("kill actor"); err != nil {
		return err
	}
	a := rt.actors[id]
	if a == nil {
		if _, dead := rt.deadActor(id); dead {
			return nil
		}
		return backend.Errorf(backend.NotFound, "kill actor", "actor %s does not exist", id)
	}
	rt.killActorLocked(a, backend.Errorf(backend.ActorDied, "actor "+id.String()+" ("+a.spec.Class+")", "killed by its handle's Kill"), false)
	return nil
}

// killActorLocked stops the actor's incarnation. With restart (a system
// failure) and restarts left, the actor is queued for a new incarnation;
// its running calls are retried per MaxTaskRetries and its queued calls
// wait. Otherwise it is dead and every call fails with err. b.mu must be
// held.
func (rt *Runtime) killActorLocked(a *actor, err error, restart bool) {
	if a.state == actorDead {
		return
	}
	if a.cancel != nil {
		a.cancel()
	}
	rt.releaseActor(a)
	running := make([]*call, 0, len(a.inflight))
	for _, cl := range a.inflight {
		cl.run = nil
		if !cl.done { // not cancelled
			running = append(running, cl)
		}
	}
	rt.running -= len(a.inflight)
	clear(a.inflight)
	a.inflight = a.inflight[:0]
	a.besideN = 0
	a.inst = nil
	if restart && (a.spec.MaxRestarts < 0 || a.restarts < a.spec.MaxRestarts) && !rt.closed {
		a.restarts++
		a.state = actorRestarting
		var requeue []*call
		for _, cl := range running {
			if int(cl.attempt) < a.spec.MaxTaskRetries || a.spec.MaxTaskRetries < 0 {
				cl.attempt++
				if cl.spec.Beside {
					a.side = append(a.side, cl)
					rt.queued++
				} else {
					requeue = append(requeue, cl)
				}
			} else {
				rt.finishCallLocked(cl, backend.Value{}, backend.Errorf(backend.Unavailable, "call "+a.spec.Class+"."+cl.spec.Method, "actor %s was lost with its node: %w", a.id, err))
			}
		}
		if len(requeue) > 0 {
			a.mailbox = append(requeue, a.mailbox[a.head:]...)
			a.head = 0
			rt.queued += len(requeue)
		}
		rt.enqueue(a.creation)
		return
	}
	a.state = actorDead
	a.deathErr = err
	if backend.CodeOf(err) != backend.ActorDied {
		a.deathErr = backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "%w", err)
	}
	a.signalReady()
	if a.creation.state == stateQueued {
		rt.unqueue(a.creation)
	}
	a.creation.state = stateDone
	for _, cl := range running {
		rt.finishCallLocked(cl, backend.Value{}, callDeathErr(a, cl))
	}
	for _, cl := range a.mailbox[a.head:] {
		rt.queued--
		rt.finishCallLocked(cl, backend.Value{}, callDeathErr(a, cl))
	}
	for _, cl := range a.side {
		rt.queued--
		rt.finishCallLocked(cl, backend.Value{}, callDeathErr(a, cl))
	}
	a.mailbox, a.head, a.side = nil, 0, nil
	if a.spec.Name != "" && rt.actorNames[a.spec.Name] == a {
		delete(rt.actorNames, a.spec.Name)
	}
	delete(rt.actors, a.id)
	rt.deadActors.add(a.id, a.deathErr)
	rt.schedule()
}

// callDeathErr is the error of a call on a dead actor: ActorDied, naming
// the method called and wrapping why the actor (named with its class)
// died.
func callDeathErr(a *actor, cl *call) error {
	return backend.Errorf(backend.ActorDied, "call "+cl.spec.Method, "%w", a.deathErr)
}

// releaseActor gives back the resources of the actor's incarnation.
func (rt *Runtime) releaseActor(a *actor) {
	t := a.creation
	if t.state == stateRunning {
		if a.node != nil {
			delete(a.node.actors, a)
		}
		if a.bundle != nil {
			delete(a.bundle.actors, a)
		}
		rt.release(t)
		t.state = stateDone
	}
	a.node, a.bundle, a.env = nil, nil, nil
}
