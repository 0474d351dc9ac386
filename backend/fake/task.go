package fake

import (
	"context"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// SubmitTask implements backend.Backend. It validates the spec, runs the
// task (and its retries) in the calling goroutine, stores the outcome and
// returns the result's ID. A task whose input object failed does not run and
// fails with the input's error.
func (b *Backend) SubmitTask(ctx context.Context, spec *backend.TaskSpec) (backend.ObjectID, error) {
	if spec == nil {
		return 0, (*backend.TaskSpec)(nil).Check("submit task", b.exec)
	}
	spec = cloneTaskSpec(spec)
	op := "submit task " + spec.Name
	rec := Call{Kind: KindTask, Name: spec.Name, TaskSpec: spec, Ref: spec.Arg.Ref}

	b.mu.Lock()
	pl, err := b.admitTaskLocked(ctx, op, spec)
	var in backend.Value
	var inErr error
	if err == nil {
		in, inErr, err = b.inputLocked(op, spec.Arg)
	}
	if err != nil {
		rec.Err = err
		b.recordLocked(rec)
		b.mu.Unlock()
		return 0, err
	}
	id := backend.ObjectID(b.newIDLocked())
	rec.Object, rec.Group, rec.Bundle = id, pl.group, pl.bundleIndex()
	if inErr != nil {
		rec.Err = inErr
		b.recordLocked(rec)
		b.objects[id] = &object{err: inErr, kind: KindTask}
		b.mu.Unlock()
		return id, nil
	}
	b.mu.Unlock()

	rec.Arg = in
	v, err := b.runTask(ctx, spec, pl, rec)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.objects[id] = &object{val: v, err: err, kind: KindTask}
	return id, nil
}

// admitTaskLocked validates a task submission. b.mu must be held.
func (b *Backend) admitTaskLocked(ctx context.Context, op string, spec *backend.TaskSpec) (placement, error) {
	if err := ctx.Err(); err != nil {
		return placement{}, err
	}
	if err := b.precheckLocked(op); err != nil {
		return placement{}, err
	}
	if err := spec.Check(op, b.exec); err != nil {
		return placement{}, err
	}
	return b.placeLocked(op, &spec.Scheduling)
}

// runTask runs the attempts of a task until one succeeds or the failure is
// not retried, and returns the last outcome.
func (b *Backend) runTask(ctx context.Context, spec *backend.TaskSpec, pl placement, rec Call) (backend.Value, error) {
	for attempt := 0; ; attempt++ {
		rec.Attempt = attempt
		info := &backend.RuntimeInfo{
			Task: spec.Name, Attempt: attempt, Node: NodeName, NodeLabels: b.opts.NodeLabels,
			Resources: spec.Scheduling.Resources.Clone(), Env: pl.env,
			Placement: backend.Placement{Group: pl.group, Bundle: pl.bundle},
		}
		arg := rec.Arg
		v, err, scripted, aborted := b.attempt(ctx, &work{rec: rec, group: pl.group, run: func(rctx context.Context) (backend.Value, error) {
			return b.exec.RunTask(rctx, spec.Name, arg, info)
		}})
		if err == nil || aborted || ctx.Err() != nil || !b.retryable(spec, attempt, err, scripted) {
			return v, err
		}
	}
}

// retryable reports whether a failed attempt is retried: a scripted
// Unavailable failure (a simulated lost node) per MaxRetries, a TaskFailed
// failure only with RetryOnError.
func (b *Backend) retryable(spec *backend.TaskSpec, attempt int, err error, scripted bool) bool {
	switch backend.CodeOf(err) {
	case backend.Unavailable:
		if !scripted {
			return false
		}
	case backend.TaskFailed:
		if !spec.RetryOnError {
			return false
		}
	default:
		return false
	}
	if spec.MaxRetries < 0 {
		return attempt+1 < b.retryLimit()
	}
	return attempt < spec.MaxRetries
}

// work is one attempt of a task or one actor call.
type work struct {
	rec   Call
	group backend.PlacementGroupID
	actor *actor
	run   func(ctx context.Context) (backend.Value, error)
}

// attempt runs one attempt of work in the calling goroutine: the reactors
// and scripts, else the real code. It records the attempt. aborted reports
// that Close, KillActor or RemovePlacementGroup decided the outcome;
// scripted that a script or reactor did.
func (b *Backend) attempt(caller context.Context, w *work) (v backend.Value, err error, scripted, aborted bool) {
	b.mu.Lock()
	rec := b.recordLocked(w.rec)
	var abort error
	switch {
	case b.closed:
		abort = closedErr("fake")
	case w.actor != nil && w.actor.state == actorDead:
		abort = backend.Errorf(backend.ActorDied, "call "+w.rec.Name[strings.LastIndexByte(w.rec.Name, '.')+1:], "%w", w.actor.deathErr)
	case w.group != 0 && b.groups[w.group].removed:
		abort = admission.PlacementGroupRemovedError(w.group)
	case w.run == nil:
		abort = backend.Errorf(backend.Internal, "run "+w.rec.Name, "nothing to run")
	}
	if abort != nil {
		rec.finishLocked(backend.Value{}, abort)
		b.mu.Unlock()
		return backend.Value{}, abort, false, true
	}
	parent, self := b.root, backend.ActorID(0)
	if w.actor != nil {
		parent, self = w.actor.ctx, w.actor.id
	}
	ctx, done := runContext(caller, parent, self)
	r := &run{cancel: done, group: w.group, actor: w.actor, name: w.rec.Name, task: w.rec.Kind == KindTask}
	if s := w.rec.TaskSpec; s != nil && s.DisplayName != "" {
		r.name = s.DisplayName // as backend/local shows it
	}
	b.running[r] = struct{}{}
	rec.Ran = true
	c := *rec
	b.mu.Unlock()

	v, err, scripted = b.standIn(c)
	if !scripted {
		v, err = w.run(ctx)
	}
	done()

	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.running, r)
	if r.abort != nil {
		v, err, aborted = backend.Value{}, r.abort, true
	}
	if err != nil && backend.CodeOf(err) != backend.Canceled {
		b.failures.Add(admission.NewTaskFailure(r.name, w.rec.Attempt, NodeName, err))
	}
	rec.finishLocked(v, err)
	return v, err, scripted, aborted
}
