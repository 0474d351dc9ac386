package ray

import (
	"context"
	"reflect"
	"runtime"

	"github.com/goray-dev/goray/backend"
)

// Task is a registered remote function with one input and one output. Create
// it with [NewTask] at package level, so that every process of the program
// (driver and workers) registers it under the same name.
//
// A *Task is immutable and safe for concurrent use.
type Task[I, O any] struct {
	name string
	op   string // "submit task <name>", for errors
	// spec is the spec of every submission without options, shared
	// through backend.ArgSubmitter (the backend never modifies it).
	spec *backend.TaskSpec
}

func newTaskHandle[I, O any](name string) *Task[I, O] {
	return &Task[I, O]{name: name, op: "submit task " + name, spec: defaultTaskSpec(name)}
}

// defaultTaskSpec is the spec of a submission of task name without
// options; its Arg is left empty.
func defaultTaskSpec(name string) *backend.TaskSpec {
	return &backend.TaskSpec{
		Name:       name,
		Scheduling: backend.Scheduling{Resources: defaultTaskResources, Placement: backend.Placement{Bundle: -1}},
		MaxRetries: DefaultTaskRetries,
	}
}

// NewTask registers fn as a task named name and returns it. Names must be
// unique in the process and stable across builds (workers find tasks by
// name); use a package-qualified name such as "examples.square". NewTask
// panics on an empty or duplicate name, naming it; call it from package
// initialization. Once worker processes have started (a backend's worker
// processes or pods, or this process serving as one), registering panics
// with "register ... at package level": the workers know only what their
// program registered as it started. The same holds for [NewActorClass]
// and [NewMethod].
func NewTask[I, O any](name string, fn func(ctx context.Context, in I) (O, error)) *Task[I, O] {
	if fn == nil {
		panic("ray: NewTask " + name + ": nil function")
	}
	mustCross("NewTask "+name, "input", reflect.TypeFor[I]())
	mustCross("NewTask "+name, "output", reflect.TypeFor[O]())
	registerTask(&taskEntry{
		name: name,
		in:   reflect.TypeFor[I](),
		out:  reflect.TypeFor[O](),
		run: func(ctx context.Context, c Codec, arg backend.Value) (backend.Value, error) {
			in, err := decode[I](c, arg)
			if err != nil {
				return backend.Value{}, backend.Errorf(backend.InvalidArgument, "task "+name, "input: %w", err)
			}
			out, err := fn(ctx, in)
			if err != nil {
				return backend.Value{}, err
			}
			v, err := encode(c, out)
			if err != nil {
				return backend.Value{}, backend.Errorf(backend.InvalidArgument, "task "+name, "output: %w", err)
			}
			return v, nil
		},
	})
	return newTaskHandle[I, O](name)
}

// LookupTask returns the registered task name with input I and output O. It
// fails with NotFound for an unknown name and InvalidArgument when the types
// differ.
func LookupTask[I, O any](name string) (*Task[I, O], error) {
	e := lookupTask(name)
	if e == nil {
		return nil, backend.Errorf(backend.NotFound, "look up task "+name, "task %q is not registered; registered tasks: %v", name, RegisteredTasks())
	}
	in, out := reflect.TypeFor[I](), reflect.TypeFor[O]()
	if e.in != in || e.out != out {
		return nil, backend.Errorf(backend.InvalidArgument, "look up task "+name, "task %q is func(%v) %v, not func(%v) %v", name, e.in, e.out, in, out)
	}
	return newTaskHandle[I, O](name), nil
}

// Name returns the task's registered name.
func (t *Task[I, O]) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

// errNilTask is the error of a call on a nil *Task.
func errNilTask(op string) error {
	return backend.Errorf(backend.InvalidArgument, op, "nil task: create it with ray.NewTask (at package level) or ray.LookupTask")
}

var defaultTaskResources = backend.Resources{backend.CPU: 1}

// Remote submits the task with input in and returns a ref to its output.
// Submission errors (nil cluster, closed cluster, bad options, an
// infeasible request, an input the codec cannot encode) are reported by the
// ref's Get and Err.
func (t *Task[I, O]) Remote(ctx context.Context, c *Cluster, in I, opts ...TaskOption) ObjectRef[O] {
	if t == nil {
		return errRef[O](c, errNilTask("submit task"))
	}
	op := t.op
	if err := c.checkCtx(ctx, op); err != nil {
		return errRef[O](c, err)
	}
	v, err := encode(c.codec, in)
	if err != nil {
		return errRef[O](c, backend.Errorf(backend.InvalidArgument, op, "input: %w", err))
	}
	return t.submit(ctx, c, backend.Arg{Value: v}, opts)
}

// RemoteRef submits the task with the output of another task (or a put
// value) as its input. The task runs once the input is ready, and holds no
// resources while it waits; if the input's work failed, this task fails
// with that error and never runs.
func (t *Task[I, O]) RemoteRef(ctx context.Context, c *Cluster, in ObjectRef[I], opts ...TaskOption) ObjectRef[O] {
	if t == nil {
		return errRef[O](c, errNilTask("submit task"))
	}
	op := t.op
	if err := c.checkCtx(ctx, op); err != nil {
		return errRef[O](c, err)
	}
	if err := in.Err(); err != nil {
		return errRef[O](c, backend.Wrap(backend.CodeOf(err), op+": input ref", err))
	}
	if in.cluster() != c {
		return errRef[O](c, backend.Errorf(backend.InvalidArgument, op, "input ref belongs to another cluster"))
	}
	ref := t.submit(ctx, c, backend.Arg{Ref: in.ID()}, opts)
	runtime.KeepAlive(in.s)
	return ref
}

func (t *Task[I, O]) submit(ctx context.Context, c *Cluster, arg backend.Arg, opts []TaskOption) ObjectRef[O] {
	if len(opts) == 0 && c.argSub != nil && t.spec != nil {
		id, err := c.argSub.SubmitTaskArg(ctx, t.spec, arg)
		if err != nil {
			return errRef[O](c, err)
		}
		return newRef[O](c, id)
	}
	if err := optionsErr(t.op, opts); err != nil {
		return errRef[O](c, err)
	}
	for _, o := range opts {
		if _, ok := o.(StreamBuffer); ok {
			return errRef[O](c, backend.Errorf(backend.InvalidArgument, t.op, "StreamBuffer applies to streaming tasks and methods (NewStreamTask, NewStreamMethod), not to %s", t.name))
		}
	}
	spec := defaultTaskSpec(t.name)
	spec.Arg = arg
	for _, o := range opts {
		if o != nil {
			o.applyTask(spec)
		}
	}
	id, err := c.b.SubmitTask(ctx, spec)
	if err != nil {
		return errRef[O](c, err)
	}
	return newRef[O](c, id)
}
