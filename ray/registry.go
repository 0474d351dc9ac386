package ray

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// The registry maps registered names to typed user code. It is process-wide:
// tasks and actors are registered at package init, in every process that runs
// them (driver and workers alike).
var registry = struct {
	sync.RWMutex
	tasks   map[string]*taskEntry
	classes map[string]*classEntry
	// taskView is a copy of tasks that the task hot path (admission and
	// every run) reads without a lock. A registration drops it; the next
	// lookup makes it again.
	taskView atomic.Pointer[map[string]*taskEntry]
	// sealed says why registrations are refused: worker processes started
	// with the manifest of this process's registry (see sealRegistry).
	sealed string
}{tasks: map[string]*taskEntry{}, classes: map[string]*classEntry{}}

// sealRegistry refuses later registrations: the registry was described to
// worker processes (a driver dialing them, or a worker serving), which know
// only what was registered when their program started; a task registered
// later would be found in the driver and be NotFound in every worker.
// why says who sealed it. registry must be locked.
func sealRegistry(why string) {
	if registry.sealed == "" {
		registry.sealed = why
	}
}

// checkOpen panics, naming what is registered, if the registry is sealed.
// registry must be locked.
func checkOpen(fn, what string) {
	if registry.sealed != "" {
		panic(fmt.Sprintf("ray: %s %s: registered after %s; worker processes only know what their program registers as it starts, so register tasks, actor classes and methods at package level (a package-level var, or init), as every example does", fn, what, registry.sealed))
	}
}

type runFunc func(ctx context.Context, c Codec, arg backend.Value) (backend.Value, error)

type taskEntry struct {
	name    string
	in, out reflect.Type
	run     runFunc
	// stream runs a streaming task (NewStreamTask), nil for others.
	stream func(ctx context.Context, c Codec, arg backend.Value, yield func(backend.Value) error) error
}

type classEntry struct {
	name    string
	actor   reflect.Type
	in      reflect.Type
	newFunc func(ctx context.Context, c Codec, arg backend.Value) (any, error)
	methods map[string]*methodEntry
}

type methodEntry struct {
	name    string
	in, out reflect.Type
	call    func(ctx context.Context, c Codec, actor any, arg backend.Value) (backend.Value, error)
}

func registerTask(e *taskEntry) {
	if e.name == "" {
		panic("ray: NewTask: empty task name")
	}
	registry.Lock()
	defer registry.Unlock()
	checkOpen("NewTask", fmt.Sprintf("%q", e.name))
	if _, dup := registry.tasks[e.name]; dup {
		panic(fmt.Sprintf("ray: NewTask: duplicate task name %q", e.name))
	}
	if _, dup := registry.classes[e.name]; dup {
		panic(fmt.Sprintf("ray: NewTask: task name %q is already an actor class name", e.name))
	}
	registry.tasks[e.name] = e
	registry.taskView.Store(nil)
}

func registerClass(e *classEntry) {
	if e.name == "" {
		panic("ray: NewActorClass: empty actor class name")
	}
	registry.Lock()
	defer registry.Unlock()
	checkOpen("NewActorClass", fmt.Sprintf("%q", e.name))
	if _, dup := registry.classes[e.name]; dup {
		panic(fmt.Sprintf("ray: NewActorClass: duplicate actor class name %q", e.name))
	}
	if _, dup := registry.tasks[e.name]; dup {
		panic(fmt.Sprintf("ray: NewActorClass: actor class name %q is already a task name", e.name))
	}
	registry.classes[e.name] = e
}

func registerMethod(class string, m *methodEntry) {
	if m.name == "" {
		panic(fmt.Sprintf("ray: NewMethod: empty method name on actor class %q", class))
	}
	registry.Lock()
	defer registry.Unlock()
	checkOpen("NewMethod", fmt.Sprintf("%q of actor class %q", m.name, class))
	c := registry.classes[class]
	if _, dup := c.methods[m.name]; dup {
		panic(fmt.Sprintf("ray: NewMethod: duplicate method %q on actor class %q", m.name, class))
	}
	c.methods[m.name] = m
}

// lastTask is the entry lookupTask found last: tasks run in runs of one
// name, and comparing the name (usually the very same string) costs less
// than hashing it. Entries are never removed, so it never goes stale.
var lastTask atomic.Pointer[taskEntry]

func lookupTask(name string) *taskEntry {
	if e := lastTask.Load(); e != nil && e.name == name {
		return e
	}
	e := lookupTaskView(name)
	if e != nil {
		lastTask.Store(e)
	}
	return e
}

func lookupTaskView(name string) *taskEntry {
	if view := registry.taskView.Load(); view != nil {
		return (*view)[name]
	}
	registry.Lock()
	defer registry.Unlock()
	view := maps.Clone(registry.tasks)
	registry.taskView.Store(&view)
	return view[name]
}

func lookupClass(name string) *classEntry {
	registry.RLock()
	defer registry.RUnlock()
	return registry.classes[name]
}

// RegisteredTasks returns the names of every registered task, sorted.
func RegisteredTasks() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.tasks))
	for n := range registry.tasks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// RegisteredActorClasses returns the names of every registered actor class,
// sorted.
func RegisteredActorClasses() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.classes))
	for n := range registry.classes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// guard runs f, turning a panic into a *TaskError with the stack, and a
// returned user error into a *TaskError with its message.
func guard(info *backend.RuntimeInfo, f func() (backend.Value, error)) (v backend.Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = backend.Value{}, panicError(info, r)
		}
	}()
	return f()
}

// panicError is the error of work that panicked with r: a *TaskError with
// the stack. Call it from the deferred function that recovered r.
func panicError(info *backend.RuntimeInfo, r any) error {
	return &backend.Error{Code: backend.TaskFailed, Err: &backend.TaskError{
		Task: taskName(info), Attempt: attempt(info),
		Message: fmt.Sprint(r), Panicked: true, Stack: string(debug.Stack()),
	}}
}

func userError(info *backend.RuntimeInfo, err error) error {
	te := &backend.TaskError{Task: taskName(info), Attempt: attempt(info), Message: err.Error(), Status: httpStatus(err)}
	var recovered *backend.TaskError
	if errors.As(err, &recovered) && recovered.Panicked {
		// A panic the task recovered itself (train's workers do, to clean
		// up): reported as the panic it was, with its stack.
		te.Message, te.Panicked, te.Stack = recovered.Message, true, recovered.Stack
	}
	return &backend.Error{Code: backend.TaskFailed, Err: te}
}

// httpStatus is the HTTP status err chose (see backend.TaskError.Status):
// that of the first error in its chain with an HTTPStatus() int method, if
// it is an error status (400 to 599); else 0.
func httpStatus(err error) int {
	var s interface{ HTTPStatus() int }
	if errors.As(err, &s) {
		if st := s.HTTPStatus(); st >= 400 && st <= 599 {
			return st
		}
	}
	return 0
}

func taskName(info *backend.RuntimeInfo) string {
	if info == nil {
		return ""
	}
	return info.Task
}

func attempt(info *backend.RuntimeInfo) int {
	if info == nil {
		return 0
	}
	return info.Attempt
}

// executor implements backend.Executor over the registry with one codec.
type executor struct{ codec Codec }

// NewExecutor returns the backend.Executor that runs this process's
// registered tasks and actors, encoding with codec (nil passes values
// unencoded, for backends that implement backend.NativeValues). Backends and
// worker processes use it; applications do not need it.
func NewExecutor(codec Codec) backend.Executor { return executor{codec: codec} }

func (x executor) HasTask(name string) bool { return lookupTask(name) != nil }

func (x executor) HasActorMethod(class, method string) bool {
	c := lookupClass(class)
	if c == nil {
		return false
	}
	if method == "" {
		return true
	}
	registry.RLock()
	defer registry.RUnlock()
	return c.methods[method] != nil
}

func (x executor) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	e := lookupTask(name)
	if e == nil {
		return backend.Value{}, backend.Errorf(backend.NotFound, "run task", "task %q is not registered in this process", name)
	}
	ctx = withRuntime(ctx, info)
	return guard(info, func() (backend.Value, error) {
		v, err := e.run(ctx, x.codec, arg)
		if err != nil && !isInternal(err) {
			return v, userError(info, err)
		}
		return v, err
	})
}

func (x executor) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	c := lookupClass(class)
	if c == nil {
		return nil, backend.Errorf(backend.NotFound, "create actor", "actor class %q is not registered in this process", class)
	}
	ctx = withRuntime(ctx, info)
	var actor any
	_, err := guard(info, func() (backend.Value, error) {
		a, err := c.newFunc(ctx, x.codec, arg)
		if err != nil && !isInternal(err) {
			return backend.Value{}, userError(info, err)
		}
		actor = a
		return backend.Value{}, err
	})
	if err != nil {
		return nil, err
	}
	return &actorInstance{codec: x.codec, class: c, actor: actor}, nil
}

type actorInstance struct {
	codec Codec
	class *classEntry
	actor any
	// last is the method called last: calls come in runs of one method,
	// and comparing its name costs less than the registry's lock and map.
	// Methods are never unregistered, so it never goes stale.
	last atomic.Pointer[methodEntry]
}

func (a *actorInstance) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (v backend.Value, err error) {
	m := a.last.Load()
	if m == nil || m.name != method {
		registry.RLock()
		m = a.class.methods[method]
		registry.RUnlock()
		if m != nil {
			a.last.Store(m)
		}
	}
	if m == nil {
		return backend.Value{}, backend.Errorf(backend.NotFound, "call actor", "method %q of actor class %q is not registered in this process", method, a.class.name)
	}
	ctx = withRuntime(ctx, info)
	// guard's work, without its closure: this runs for every call.
	defer func() {
		if r := recover(); r != nil {
			v, err = backend.Value{}, panicError(info, r)
		}
	}()
	v, err = m.call(ctx, a.codec, a.actor, arg)
	if err != nil && !isInternal(err) {
		return v, userError(info, err)
	}
	return v, err
}

// isInternal reports whether err is already a goray error (a codec failure
// or an error of nested goray work), which passes through unwrapped.
func isInternal(err error) bool {
	_, ok := err.(*backend.Error)
	return ok
}
