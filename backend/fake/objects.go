package fake

import (
	"context"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// object is a done entry of the object store: the fake stores an object
// only once its work is over, so every known object is ready.
type object struct {
	val backend.Value
	err error
	// kind is what made it: KindTask, KindMethod or KindPut.
	kind Kind
}

// inputLocked resolves the input of work: the value itself, or the value or
// error (inErr) of the referenced object. A missing object is a NotFound
// error. b.mu must be held.
func (b *Backend) inputLocked(op string, arg backend.Arg) (v backend.Value, inErr, err error) {
	if arg.Ref == 0 {
		return arg.Value, nil, nil
	}
	o := b.objects[arg.Ref]
	if o == nil {
		return backend.Value{}, nil, backend.Errorf(backend.NotFound, op, "input object %s does not exist (never created, or freed)", arg.Ref)
	}
	return o.val, o.err, nil
}

// Put implements backend.Backend.
func (b *Backend) Put(ctx context.Context, v backend.Value) (backend.ObjectID, error) {
	const op = "put object"
	rec := Call{Kind: KindPut, Arg: v}
	b.mu.Lock()
	err := ctx.Err()
	if err == nil {
		err = b.precheckLocked(op)
	}
	r := b.recordLocked(rec)
	if err != nil {
		r.Err = err
		b.mu.Unlock()
		return 0, err
	}
	c := *r
	b.mu.Unlock()

	err = b.hook(op, c)

	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		err = b.precheckLocked(op)
	}
	if err != nil {
		r.Err = err
		return 0, err
	}
	id := backend.ObjectID(b.newIDLocked())
	b.objects[id] = &object{val: v, kind: KindPut}
	r.Object = id
	return id, nil
}

// Get implements backend.Backend. Every object the fake knows is ready, so
// Get returns at once, whatever ctx.
func (b *Backend) Get(ctx context.Context, id backend.ObjectID) (backend.Value, error) {
	const op = "get object"
	b.mu.Lock()
	r := b.recordLocked(Call{Kind: KindGet, Object: id})
	var o *object
	err := b.precheckLocked(op)
	if err == nil {
		if o = b.objects[id]; o == nil {
			err = backend.Errorf(backend.NotFound, op, "object %s does not exist (never created, or freed)", id)
		}
	}
	if err != nil {
		r.Err = err
		b.mu.Unlock()
		return backend.Value{}, err
	}
	c := *r
	b.mu.Unlock()

	if err := b.hook(op, c); err != nil {
		b.mu.Lock()
		r.Err = err
		b.mu.Unlock()
		return backend.Value{}, err
	}
	b.mu.Lock()
	r.finishLocked(o.val, o.err)
	b.mu.Unlock()
	return o.val, o.err
}

// Wait implements backend.Backend. Every object the fake knows is ready, so
// Wait reports them all ready at once; an unknown object is NotFound.
func (b *Backend) Wait(ctx context.Context, ids []backend.ObjectID, n int) ([]bool, error) {
	const op = "wait for objects"
	ready := make([]bool, len(ids))
	b.mu.Lock()
	r := b.recordLocked(Call{Kind: KindWait, Objects: slices.Clone(ids)})
	err := b.precheckLocked(op)
	for _, id := range ids {
		if err != nil {
			break
		}
		if b.objects[id] == nil {
			err = backend.Errorf(backend.NotFound, op, "object %s does not exist (never created, or freed)", id)
		}
	}
	c := *r
	b.mu.Unlock()

	if err == nil {
		err = b.hook(op, c)
	}
	if err != nil {
		b.mu.Lock()
		r.Err = err
		b.mu.Unlock()
		return ready, err
	}
	for i := range ready {
		ready[i] = true
	}
	return ready, nil
}

// Free implements backend.Backend: it deletes the objects. It is not
// recorded, since ray calls it from the garbage collector.
func (b *Backend) Free(ids ...backend.ObjectID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		delete(b.objects, id)
	}
}

var _ backend.TaskCanceler = (*Backend)(nil)

// CancelTask implements backend.TaskCanceler. The fake runs work in the
// caller's goroutine, so a task or call has finished by the time its ID
// exists: cancelling it does nothing, as for finished work on any backend.
// A Put value or an unknown ID is NotFound; Force on an actor call is
// InvalidArgument, as on every backend.
func (b *Backend) CancelTask(ctx context.Context, id backend.ObjectID, opts backend.CancelOptions) error {
	const op = "cancel task"
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.objects[id]
	switch {
	case o == nil || o.kind == KindPut:
		return backend.Errorf(backend.NotFound, op, "%s is not the result of a live task or actor call", id)
	case opts.Force && o.kind == KindMethod:
		return backend.Errorf(backend.InvalidArgument, op, "an actor call cannot be cancelled with Force, which would end the actor's worker process and every other call of the actor (as in Ray); cancel it without Force, or kill the actor with its handle's Kill")
	}
	return nil
}
