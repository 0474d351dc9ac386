package fake

import (
	"context"

	"golang.org/x/sync/semaphore"

	"github.com/goray-dev/goray/backend"
)

type actorState int

const (
	actorPending actorState = iota
	actorAlive
	actorDead
)

var actorStateNames = [...]string{"PENDING", "ALIVE", "DEAD"}

type actor struct {
	id       backend.ActorID
	spec     *backend.ActorSpec
	pl       placement
	state    actorState
	inst     backend.ActorInstance
	ctx      context.Context // the actor's lifetime: cancelled when it dies
	cancel   context.CancelFunc
	deathErr error
	// slots serializes calls: MaxConcurrency at once, in arrival order.
	// The constructor holds them all.
	slots *semaphore.Weighted
	// ready is closed when the constructor has returned.
	ready chan struct{}
}

// CreateActor implements backend.Backend. It runs the constructor in the
// calling goroutine; a failed constructor leaves the actor dead, and its
// error is reported by ActorReady and by every call, with code ActorDied.
func (b *Backend) CreateActor(ctx context.Context, spec *backend.ActorSpec) (backend.ActorID, error) {
	if spec == nil {
		return 0, (*backend.ActorSpec)(nil).Check("create actor", b.exec, nil)
	}
	spec = cloneActorSpec(spec)
	op := "create actor " + spec.Class
	b.mu.Lock()
	r := b.recordLocked(Call{Kind: KindActor, Name: spec.Class, ActorSpec: spec, Arg: spec.Arg.Value, Ref: spec.Arg.Ref})
	pl, err := b.admitActorLocked(ctx, op, spec)
	if err != nil {
		r.Err = err
		b.mu.Unlock()
		return 0, err
	}
	slots := int64(max(1, spec.MaxConcurrency))
	a := &actor{
		id: backend.ActorID(b.newIDLocked()), spec: spec, pl: pl,
		slots: semaphore.NewWeighted(slots), ready: make(chan struct{}),
	}
	// Calls found through the actor's name wait for the constructor.
	a.slots.TryAcquire(slots)
	defer a.slots.Release(slots)
	defer close(a.ready)
	a.ctx, a.cancel = context.WithCancel(b.root)
	// The constructor holds the actor: a call on it from inside the
	// constructor fails instead of deadlocking.
	ctorCtx := context.WithValue(a.ctx, heldKey{}, &held{actor: a.id, next: heldBy(ctx)})
	b.actors[a.id] = a
	if spec.Name != "" {
		b.actorNames[spec.Name] = a
	}
	r.Actor, r.Group, r.Bundle, r.Ran = a.id, pl.group, pl.bundleIndex(), true
	c := *r
	b.mu.Unlock()

	// Scripts and reactors can only fail a constructor.
	handled, _, err := b.react(c)
	switch {
	case handled && err != nil:
		err = workError(spec.Class, 0, err)
	case handled:
	default:
		var scripted bool
		_, err, scripted = b.nextScripted(spec.Class, 0)
		if scripted && err == nil {
			err = backend.Errorf(backend.InvalidArgument, "create actor "+spec.Class, "SetResult(%q) scripts a result for actor class %s; a constructor has no result: use SetError or FailNext", spec.Class, spec.Class)
		}
	}
	var inst backend.ActorInstance
	if err == nil {
		info := &backend.RuntimeInfo{
			Task: spec.Class, Node: NodeName, NodeLabels: b.opts.NodeLabels,
			Resources: spec.Scheduling.Resources.Clone(), Env: pl.env, Actor: a.id,
			Placement: backend.Placement{Group: pl.group, Bundle: pl.bundle},
		}
		inst, err = b.exec.NewActor(ctorCtx, spec.Class, spec.Arg.Value, info)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case a.state == actorDead: // killed, removed with its group, or closed meanwhile
		r.Err = a.deathErr
	case b.closed:
		r.Err = closedErr("create actor " + spec.Class)
	case err != nil:
		b.killLocked(a, backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "constructor of %s failed: %w", spec.Class, err))
		r.Err = a.deathErr
	default:
		a.inst, a.state = inst, actorAlive
	}
	return a.id, nil
}

// liveActorLocked reports the live actor named name (a dead actor's name is
// freed when it dies). b.mu must be held.
func (b *Backend) liveActorLocked(name string) (backend.ActorID, bool) {
	if other := b.actorNames[name]; other != nil {
		return other.id, true
	}
	return 0, false
}

// admitActorLocked validates an actor creation. b.mu must be held.
func (b *Backend) admitActorLocked(ctx context.Context, op string, spec *backend.ActorSpec) (placement, error) {
	if err := ctx.Err(); err != nil {
		return placement{}, err
	}
	if err := b.precheckLocked(op); err != nil {
		return placement{}, err
	}
	if err := spec.Check(op, b.exec, b.liveActorLocked); err != nil {
		return placement{}, err
	}
	return b.placeLocked(op, &spec.Scheduling)
}

// killLocked makes an actor dead with err (code ActorDied): its context is
// cancelled, its running calls fail with err, and its name is free again.
// b.mu must be held.
func (b *Backend) killLocked(a *actor, err error) {
	if a.state == actorDead {
		return
	}
	if backend.CodeOf(err) != backend.ActorDied {
		err = backend.Errorf(backend.ActorDied, "actor "+a.id.String(), "%w", err)
	}
	a.state, a.deathErr, a.inst = actorDead, err, nil
	a.cancel()
	for r := range b.running {
		if r.actor == a {
			r.abortLocked(err)
		}
	}
	if a.spec.Name != "" && b.actorNames[a.spec.Name] == a {
		delete(b.actorNames, a.spec.Name)
	}
}

// ActorReady implements backend.Backend. Constructors run at creation, so it
// returns at once (unless another goroutine found the actor by name while
// its constructor runs): nil for a live actor, the cause of death (code
// ActorDied) for a dead one.
func (b *Backend) ActorReady(ctx context.Context, id backend.ActorID) error {
	const op = "wait for actor"
	a, r, c, err := b.lookupActor(op, KindActorReady, id)
	if err == nil {
		err = b.hook(op, c)
	}
	if err == nil {
		select {
		case <-a.ready:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		if err = b.precheckLocked(op); err == nil {
			err = a.deathErr
		}
	}
	r.Err = err
	return err
}

// KillActor implements backend.Backend: the actor dies at once, and calls
// running in other goroutines have their context cancelled and fail with
// ActorDied. Killing a dead actor is not an error.
func (b *Backend) KillActor(ctx context.Context, id backend.ActorID) error {
	const op = "kill actor"
	a, r, c, err := b.lookupActor(op, KindKill, id)
	if err == nil {
		err = b.hook(op, c)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		if err = b.precheckLocked(op); err == nil {
			b.killLocked(a, backend.Errorf(backend.ActorDied, "actor "+id.String()+" ("+a.spec.Class+")", "killed by its handle's Kill"))
		}
	}
	r.Err = err
	return err
}

// lookupActor records a call about actor id and finds it.
func (b *Backend) lookupActor(op string, kind Kind, id backend.ActorID) (*actor, *Call, Call, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recordLocked(Call{Kind: kind, Actor: id})
	if err := b.precheckLocked(op); err != nil {
		r.Err = err
		return nil, r, *r, err
	}
	a := b.actors[id]
	if a == nil {
		r.Err = backend.Errorf(backend.NotFound, op, "actor %s does not exist", id)
		return nil, r, *r, r.Err
	}
	r.Name = a.spec.Class
	return a, r, *r, nil
}

// NamedActor implements backend.Backend.
func (b *Backend) NamedActor(ctx context.Context, name string) (backend.ActorID, string, error) {
	op := "look up actor " + name
	b.mu.Lock()
	r := b.recordLocked(Call{Kind: KindNamedActor, Name: name})
	err := b.precheckLocked(op)
	c := *r
	b.mu.Unlock()
	if err == nil {
		err = b.hook(op, c)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = b.precheckLocked(op)
	}
	var a *actor
	if err == nil {
		if a = b.actorNames[name]; a == nil {
			err = backend.Errorf(backend.NotFound, op, "no live actor is named %q", name)
		}
	}
	if err != nil {
		r.Err = err
		return 0, "", err
	}
	r.Actor = a.id
	return a.id, a.spec.Class, nil
}

// CallActor implements backend.Backend. It runs the method in the calling
// goroutine once the actor has a free call slot (see
// backend.ActorSpec.MaxConcurrency), and stores the outcome. A call on a
// dead actor, or with a failed input, fails without running. A call on an
// actor whose slots the calling call chain itself holds (a method calling
// its own actor) fails with Unimplemented: the fake cannot queue it behind
// the running call. If ctx ends while the call waits for a slot, CallActor
// returns ctx.Err() and the call never runs.
func (b *Backend) CallActor(ctx context.Context, spec *backend.CallSpec) (backend.ObjectID, error) {
	if spec == nil {
		return 0, backend.Errorf(backend.InvalidArgument, "call actor", "nil call spec")
	}
	spec = cloneCallSpec(spec)
	name := spec.Class + "." + spec.Method
	op := "call " + name
	rec := Call{Kind: KindMethod, Name: name, CallSpec: spec, Actor: spec.Actor, Ref: spec.Arg.Ref}

	b.mu.Lock()
	a, err := b.admitCallLocked(ctx, op, spec)
	var in backend.Value
	var inErr error
	if err == nil {
		in, inErr, err = b.inputLocked(op, spec.Arg)
	}
	if err == nil && !spec.Beside && heldBy(ctx).contains(a.id) && a.state != actorDead {
		if a.state == actorPending || !a.slots.TryAcquire(1) {
			err = backend.Errorf(backend.Unimplemented, op, "%s calls itself from inside its own work; the fake runs calls synchronously and cannot queue this call behind the running one (use backend/local)", a.id)
		} else {
			a.slots.Release(1)
		}
	}
	if err != nil {
		rec.Err = err
		b.recordLocked(rec)
		b.mu.Unlock()
		return 0, err
	}
	id := backend.ObjectID(b.newIDLocked())
	rec.Object, rec.Group, rec.Bundle = id, a.pl.group, a.pl.bundleIndex()
	if a.state == actorDead || inErr != nil {
		if inErr == nil {
			inErr = backend.Errorf(backend.ActorDied, "call "+spec.Method, "%w", a.deathErr)
		}
		rec.Err = inErr
		b.recordLocked(rec)
		b.objects[id] = &object{err: inErr, kind: KindMethod}
		b.mu.Unlock()
		return id, nil
	}
	b.mu.Unlock()

	rec.Arg = in
	v, err, abandoned := b.call(ctx, a, spec.Method, rec)

	b.mu.Lock()
	defer b.mu.Unlock()
	if abandoned {
		rec.Object, rec.Err = 0, err
		b.recordLocked(rec)
		return 0, err
	}
	b.objects[id] = &object{val: v, err: err, kind: KindMethod}
	return id, nil
}

// admitCallLocked validates a call and finds its actor. b.mu must be held.
func (b *Backend) admitCallLocked(ctx context.Context, op string, spec *backend.CallSpec) (*actor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.precheckLocked(op); err != nil {
		return nil, err
	}
	a := b.actors[spec.Actor]
	if a == nil {
		return nil, backend.Errorf(backend.NotFound, op, "actor %s does not exist", spec.Actor)
	}
	if a.spec.Class != spec.Class {
		return nil, backend.Errorf(backend.NotFound, op, "actor %s is of class %q; method %s.%s cannot be called on it", spec.Actor, a.spec.Class, spec.Class, spec.Method)
	}
	if spec.Method == "" {
		return nil, backend.Errorf(backend.InvalidArgument, op, "empty method name")
	}
	if !b.exec.HasActorMethod(spec.Class, spec.Method) {
		return nil, backend.Errorf(backend.NotFound, op, "method %q of actor class %q is not registered", spec.Method, spec.Class)
	}
	return a, nil
}

// call waits for a call slot of a and runs the call. abandoned reports that
// the caller's context ended before a slot freed up; err is then ctx.Err().
func (b *Backend) call(ctx context.Context, a *actor, method string, rec Call) (v backend.Value, err error, abandoned bool) {
	if !rec.CallSpec.Beside { // a call beside the others takes no slot
		wait, stop := context.WithCancel(a.ctx)
		unhook := context.AfterFunc(ctx, stop)
		err = a.slots.Acquire(wait, 1)
		unhook()
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return backend.Value{}, ctx.Err(), true
			}
			// The actor died or the backend closed while the call waited; the
			// attempt reports why without running.
			_, err, _, _ = b.attempt(ctx, &work{rec: rec, actor: a, group: a.pl.group})
			return backend.Value{}, err, false
		}
		defer a.slots.Release(1)
	}
	b.mu.Lock()
	inst := a.inst // nil when dead: the attempt then fails without running
	b.mu.Unlock()
	info := &backend.RuntimeInfo{
		Task: rec.Name, Node: NodeName, NodeLabels: b.opts.NodeLabels, Env: a.pl.env, Actor: a.id,
		Placement: backend.Placement{Group: a.pl.group, Bundle: a.pl.bundle},
		Resources: a.spec.Scheduling.Resources,
	}
	v, err, _, _ = b.attempt(ctx, &work{rec: rec, actor: a, group: a.pl.group, run: func(rctx context.Context) (backend.Value, error) {
		if inst == nil {
			return backend.Value{}, backend.Errorf(backend.Internal, "call actor "+a.id.String(), "the actor has no instance")
		}
		return inst.Call(rctx, method, rec.Arg, info)
	}})
	return v, err, false
}
