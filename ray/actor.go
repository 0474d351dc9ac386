package ray

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// ActorClass is a registered actor type: a constructor that builds an A from
// an input I. Methods are registered on it with [NewMethod]. Create classes
// at package level with [NewActorClass].
//
// A *ActorClass is immutable and safe for concurrent use.
type ActorClass[A, I any] struct {
	name string
}

// NewActorClass registers an actor class named name whose constructor is
// newFn. It panics on an empty or duplicate name (shared with task names).
func NewActorClass[A, I any](name string, newFn func(ctx context.Context, in I) (A, error)) *ActorClass[A, I] {
	if newFn == nil {
		panic("ray: NewActorClass " + name + ": nil constructor")
	}
	mustCross("NewActorClass "+name, "constructor input", reflect.TypeFor[I]())
	registerClass(&classEntry{
		name:    name,
		actor:   reflect.TypeFor[A](),
		in:      reflect.TypeFor[I](),
		methods: map[string]*methodEntry{},
		newFunc: func(ctx context.Context, c Codec, arg backend.Value) (any, error) {
			in, err := decode[I](c, arg)
			if err != nil {
				return nil, backend.Errorf(backend.InvalidArgument, "actor "+name, "constructor input: %w", err)
			}
			return newFn(ctx, in)
		},
	})
	return &ActorClass[A, I]{name: name}
}

// Name returns the class's registered name.
func (a *ActorClass[A, I]) Name() string { return a.name }

// Method is a registered method of actor type A with input I and output O.
// It can only be called on an *ActorHandle[A].
type Method[A, I, O any] struct {
	class, name string
	op          string // "call <class>.<name>", for errors
}

// NewMethod registers fn as method name of class. It panics on an empty or
// duplicate method name.
//
// fn's ctx is the call's: cancelled when the call is cancelled or its
// actor dies, and carrying its [RuntimeContext]. Code that fn leaves
// running after it returns (a goroutine it starts) must look at ctx, or
// derive a context from it, before fn returns: a call context that its
// call's code never looked at before the call returned reports
// context.Canceled, and no values, from then on (its record is reused for
// a later call).
func NewMethod[A, CI, I, O any](class *ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in I) (O, error)) *Method[A, I, O] {
	if fn == nil {
		panic(fmt.Sprintf("ray: NewMethod %s.%s: nil function", class.name, name))
	}
	full := class.name + "." + name
	mustCross("NewMethod "+full, "input", reflect.TypeFor[I]())
	mustCross("NewMethod "+full, "output", reflect.TypeFor[O]())
	registerMethod(class.name, &methodEntry{
		name: name,
		in:   reflect.TypeFor[I](),
		out:  reflect.TypeFor[O](),
		call: func(ctx context.Context, c Codec, actor any, arg backend.Value) (backend.Value, error) {
			a, err := actorAs[A](actor, full)
			if err != nil {
				return backend.Value{}, err
			}
			in, err := decode[I](c, arg)
			if err != nil {
				return backend.Value{}, backend.Errorf(backend.InvalidArgument, "call "+full, "input: %w", err)
			}
			out, err := fn(ctx, a, in)
			if err != nil {
				return backend.Value{}, err
			}
			v, err := encode(c, out)
			if err != nil {
				return backend.Value{}, backend.Errorf(backend.InvalidArgument, "call "+full, "output: %w", err)
			}
			return v, nil
		},
	})
	return &Method[A, I, O]{class: class.name, name: name, op: "call " + full}
}

// actorAs is the actor a method of class.method runs on, as its Go type.
func actorAs[A any](actor any, full string) (A, error) {
	a, ok := actor.(A)
	if !ok {
		return a, backend.Errorf(backend.Internal, "call "+full, "actor is %T, not %v", actor, reflect.TypeFor[A]())
	}
	return a, nil
}

// Name returns "class.method".
func (m *Method[A, I, O]) Name() string { return m.class + "." + m.name }

// ActorHandle refers to a live (or dead) actor of type A. Handles are safe to
// copy and share between goroutines.
type ActorHandle[A any] struct {
	c     *Cluster
	class string
	id    backend.ActorID
	err   error
	// calls keeps the spec of the method called last, shared by its
	// calls through backend.CallArgSubmitter (nil: a spec per call).
	calls *handleCalls
}

// handleCalls is an actor handle's spec of the method called last: calls
// come in runs of one method, and the backend never modifies a spec.
type handleCalls struct {
	last atomic.Pointer[backend.CallSpec]
}

// ID returns the backend's actor ID (0 if creation failed).
func (h *ActorHandle[A]) ID() ActorID { return h.id }

// Err returns the creation's submission error, if any.
func (h *ActorHandle[A]) Err() error {
	if h == nil {
		return backend.Errorf(backend.InvalidArgument, "use actor handle", "nil actor handle")
	}
	return h.err
}

// Remote creates an actor with constructor input in. It returns at once; a
// constructor failure makes the actor dead, and its calls fail with
// ActorDied. [ActorHandle.Ready] waits for the constructor. Submission
// errors are reported by Ready, Err and every call.
func (a *ActorClass[A, I]) Remote(ctx context.Context, c *Cluster, in I, opts ...ActorOption) *ActorHandle[A] {
	op := "create actor " + a.name
	h := &ActorHandle[A]{c: c, class: a.name, calls: new(handleCalls)}
	if h.err = c.checkCtx(ctx, op); h.err != nil {
		return h
	}
	v, err := encode(c.codec, in)
	if err != nil {
		h.err = backend.Errorf(backend.InvalidArgument, op, "constructor input: %w", err)
		return h
	}
	if h.err = optionsErr(op, opts); h.err != nil {
		return h
	}
	cfg := actorConfig{maxConcurrency: 1}
	cfg.sched.Resources = backend.Resources{}
	cfg.sched.Placement.Bundle = -1
	for _, o := range opts {
		if o != nil {
			o.applyActor(&cfg)
		}
	}
	h.id, h.err = c.b.CreateActor(ctx, &backend.ActorSpec{
		Class:          a.name,
		Arg:            backend.Arg{Value: v},
		Scheduling:     cfg.sched,
		MaxRestarts:    cfg.maxRestarts,
		MaxConcurrency: cfg.maxConcurrency,
		MaxTaskRetries: cfg.maxTaskRetries,
		Name:           cfg.name,
	})
	return h
}

// GetActor finds the live actor named name. It fails with NotFound when no
// live actor has the name, and InvalidArgument when it is not of class.
func GetActor[A, I any](ctx context.Context, c *Cluster, class *ActorClass[A, I], name string) (*ActorHandle[A], error) {
	op := "get actor " + name
	if err := c.checkCtx(ctx, op); err != nil {
		return nil, err
	}
	id, cls, err := c.b.NamedActor(ctx, name)
	if err != nil {
		return nil, err
	}
	if cls != class.name {
		return nil, backend.Errorf(backend.InvalidArgument, op, "actor %q is of class %q, not %q", name, cls, class.name)
	}
	return &ActorHandle[A]{c: c, class: cls, id: id, calls: new(handleCalls)}, nil
}

// Ready waits until the actor's constructor has returned, and returns its
// error (ActorDied wrapping the cause) if the actor is dead.
func (h *ActorHandle[A]) Ready(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	if err := h.c.checkCtx(ctx, "wait for actor"); err != nil {
		return err
	}
	return h.c.b.ActorReady(ctx, h.id)
}

// Kill kills the actor without restarting it. Its queued and running calls
// fail with ActorDied. Killing a dead actor is not an error.
func (h *ActorHandle[A]) Kill(ctx context.Context) error {
	if err := h.Err(); err != nil {
		return err
	}
	if err := h.c.checkCtx(ctx, "kill actor"); err != nil {
		return err
	}
	return h.c.b.KillActor(ctx, h.id)
}

// Remote calls the method on the actor with input in and returns a ref to
// its output. Calls run one at a time in submission order unless the actor
// was created with [MaxConcurrency].
func (m *Method[A, I, O]) Remote(ctx context.Context, h *ActorHandle[A], in I) ObjectRef[O] {
	op := m.op
	if err := h.Err(); err != nil {
		return errRef[O](nil, err)
	}
	c := h.c
	if err := c.checkCtx(ctx, op); err != nil {
		return errRef[O](c, err)
	}
	v, err := encode(c.codec, in)
	if err != nil {
		return errRef[O](c, backend.Errorf(backend.InvalidArgument, op, "input: %w", err))
	}
	return m.call(ctx, h, backend.Arg{Value: v})
}

// RemoteRef calls the method with the output of other work as its input;
// the call is queued on the actor once the input is ready.
func (m *Method[A, I, O]) RemoteRef(ctx context.Context, h *ActorHandle[A], in ObjectRef[I]) ObjectRef[O] {
	op := m.op
	if err := h.Err(); err != nil {
		return errRef[O](nil, err)
	}
	c := h.c
	if err := c.checkCtx(ctx, op); err != nil {
		return errRef[O](c, err)
	}
	if err := in.Err(); err != nil {
		return errRef[O](c, backend.Wrap(backend.CodeOf(err), op+": input ref", err))
	}
	if in.cluster() != c {
		return errRef[O](c, backend.Errorf(backend.InvalidArgument, op, "input ref belongs to another cluster"))
	}
	ref := m.call(ctx, h, backend.Arg{Ref: in.ID()})
	runtime.KeepAlive(in.s)
	return ref
}

func (m *Method[A, I, O]) call(ctx context.Context, h *ActorHandle[A], arg backend.Arg) ObjectRef[O] {
	var id backend.ObjectID
	var err error
	if sub := h.c.callSub; sub != nil && h.calls != nil {
		spec := h.calls.last.Load()
		if spec == nil || spec.Method != m.name || spec.Class != m.class {
			spec = &backend.CallSpec{Actor: h.id, Class: m.class, Method: m.name}
			h.calls.last.Store(spec)
		}
		id, err = sub.CallActorArg(ctx, spec, arg)
	} else {
		id, err = h.c.b.CallActor(ctx, &backend.CallSpec{Actor: h.id, Class: m.class, Method: m.name, Arg: arg})
	}
	if err != nil {
		return errRef[O](h.c, err)
	}
	return newRef[O](h.c, id)
}
