// Package backend defines the driver interface that goray backends implement,
// and the spec types and error codes they share.
//
// Users do not call a backend directly: they hand one to ray.NewCluster and
// use the typed API of package ray. This package is for backend authors and
// for tools that inspect a backend's optional capabilities.
//
// # Shape
//
// The interface is byte-level: tasks, actors and methods are named by their
// registered names, arguments and results are encoded [Value]s, and
// resources, label selectors and placement are plain data. A backend runs
// user code through the [Executor] it is given in [Backend.Start]; in a
// remote backend the executor lives in the worker process instead.
//
// [Backend] is the small required interface. Optional capabilities are
// separate interfaces, detected by type assertion as database/sql does:
// [Snapshotter], [FaultInjector], [TaskCanceler], [SliceReserver],
// [NativeValues].
//
// # Validation
//
// Input is validated here, once for every backend: [Resources.Validate]
// (amounts finite, 0 or at least [Granularity], at most [MaxAmount]),
// [PlacementGroupSpec.Validate] (at most [MaxBundles] bundles) and
// [SliceRequest.Resolve]. Their cost follows the input's size, so backends
// call them before taking locks.
//
// # Errors
//
// Every error a backend returns is an *[Error] with a [Code] from the closed
// set, or a context error returned unchanged.
//
// # Concurrency
//
// Every method of a Backend must be safe for concurrent use.
package backend

import (
	"context"
	"fmt"
)

// ObjectID names an object in a backend's object store: a task result, an
// actor call result or a put value. IDs are assigned by the backend and never
// reused within one backend.
type ObjectID uint64

func (id ObjectID) String() string { return fmt.Sprintf("obj-%d", uint64(id)) }

// ActorID names an actor.
type ActorID uint64

func (id ActorID) String() string { return fmt.Sprintf("actor-%d", uint64(id)) }

// PlacementGroupID names a placement group.
type PlacementGroupID uint64

func (id PlacementGroupID) String() string { return fmt.Sprintf("pg-%d", uint64(id)) }

// Value is an encoded argument or result. Data holds the encoded bytes.
// Native holds an unencoded Go value instead, and is only ever set for
// backends that implement [NativeValues]; it is how the in-process simulator
// skips the codec for benchmarks. When both are set, Native is the value
// Data encodes: work in the caller's process may take Native, and a value
// that leaves the process carries Data only (an HTTP router that decoded a
// request body to check it passes both).
type Value struct {
	Data   []byte
	Native any
}

// Arg is the single input of a task or call: either a value, or the result of
// another object (Ref != 0), which the backend resolves before the work runs
// without holding resources while it waits. If the object is an error, the
// dependent work fails with that error and never runs.
type Arg struct {
	Value Value
	Ref   ObjectID
}

// Placement pins work to a placement group bundle.
type Placement struct {
	// Group is the placement group; 0 means none.
	Group PlacementGroupID
	// Bundle is the bundle index, or -1 for any bundle of the group.
	Bundle int
}

// Scheduling is what a task or actor asks of the scheduler.
type Scheduling struct {
	// Resources held while the work runs (for an actor, for its lifetime).
	Resources Resources
	// NodeSelector restricts the nodes the work may run on.
	NodeSelector LabelSelector
	// Placement pins the work into a placement group bundle.
	Placement Placement
}

// TaskSpec describes one task submission.
type TaskSpec struct {
	// Name is the task's registered name.
	Name string
	// Arg is the single input.
	Arg Arg
	// Scheduling holds resources, selector and placement.
	Scheduling Scheduling
	// MaxRetries is how many times the task is retried after a system failure
	// (code Unavailable: its node died). Negative means forever.
	MaxRetries int
	// RetryOnError also retries when user code returns an error or panics.
	RetryOnError bool
	// DisplayName is an optional name for state snapshots.
	DisplayName string
}

// ActorSpec describes an actor creation.
type ActorSpec struct {
	// Class is the registered actor class name.
	Class string
	// Arg is the constructor's input.
	Arg Arg
	// Scheduling holds resources, selector and placement.
	Scheduling Scheduling
	// MaxRestarts is how many times the actor is restarted after its node
	// dies. Negative means forever.
	MaxRestarts int
	// MaxConcurrency is how many calls run at once; values below 1 mean 1
	// (calls run one at a time, in submission order).
	MaxConcurrency int
	// MaxTaskRetries is how many times a call lost to a failure is retried
	// on the restarted actor.
	MaxTaskRetries int
	// Name optionally names the actor; names are unique among live actors.
	Name string
}

// CallSpec describes one actor method call.
type CallSpec struct {
	// Actor is the target.
	Actor ActorID
	// Class is the actor class the caller believes the actor has; a mismatch
	// is a NotFound error, never a call into the wrong type.
	Class string
	// Method is the registered method name.
	Method string
	// Arg is the single input.
	Arg Arg
	// Beside runs the call as soon as the actor is alive, beside its other
	// calls, without waiting for or taking one of its MaxConcurrency slots
	// and regardless of the calls queued before it. It is for calls that
	// only hand out what the actor's other work left for them (a streaming
	// method's values, read while the method runs).
	Beside bool
}

// Strategy is a placement group strategy.
type Strategy int

// Placement group strategies, as in Ray.
const (
	// Pack places bundles on as few nodes as possible (best effort).
	Pack Strategy = iota
	// Spread places bundles on distinct nodes where possible (best effort).
	Spread
	// StrictPack places all bundles on one node, or fails to place.
	StrictPack
	// StrictSpread places every bundle on a different node, or fails to place.
	StrictSpread
)

var strategyNames = [...]string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}

func (s Strategy) String() string {
	if s >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Valid reports whether s is one of the four strategies.
func (s Strategy) Valid() bool { return s >= Pack && s <= StrictSpread }

// Bundle is one gang-scheduled slot of a placement group.
type Bundle struct {
	// Resources reserved on the bundle's node.
	Resources Resources
	// LabelSelector restricts the bundle's node.
	LabelSelector LabelSelector
	// Env is added to the runtime env of work running in the bundle (a TPU
	// slice reservation puts each worker's TPU_* variables here).
	Env map[string]string
}

// PlacementGroupSpec describes a placement group: bundles reserved together,
// all or none.
type PlacementGroupSpec struct {
	Name     string
	Strategy Strategy
	Bundles  []Bundle
}

// RuntimeInfo is what running user code may learn about where it runs.
type RuntimeInfo struct {
	// Task is the task name, or "class.method" for actor calls, or the class
	// for a constructor.
	Task string
	// Attempt is the 0-based attempt.
	Attempt int
	// Node is the node's name; NodeLabels its labels.
	Node       string
	NodeLabels map[string]string
	// Resources granted to the work.
	Resources Resources
	// Placement is the placement group and bundle the work runs in (Bundle
	// is the concrete index, never -1).
	Placement Placement
	// Env is the work's environment: the node's env and its bundle's env.
	Env map[string]string
	// Actor is the actor's ID for actor work.
	Actor ActorID
}

// Executor runs registered user code. Package ray implements it from its
// registry; a backend calls it, in whatever process the work runs in.
// Implementations turn panics into *TaskError and must be safe for concurrent
// use.
type Executor interface {
	// RunTask runs the registered task name.
	RunTask(ctx context.Context, name string, arg Value, info *RuntimeInfo) (Value, error)
	// NewActor runs the constructor of the registered actor class.
	NewActor(ctx context.Context, class string, arg Value, info *RuntimeInfo) (ActorInstance, error)
	// HasTask reports whether a task name is registered.
	HasTask(name string) bool
	// HasActorMethod reports whether class (and, if method is non-empty,
	// class.method) is registered.
	HasActorMethod(class, method string) bool
}

// ActorInstance is a live actor inside an Executor.
type ActorInstance interface {
	// Call runs a registered method of the actor.
	Call(ctx context.Context, method string, arg Value, info *RuntimeInfo) (Value, error)
}

// TaskStarter is implemented by executors that run tasks elsewhere (in a
// worker process): StartTask sends the task and returns without waiting
// for it, and done receives the result, so that a backend keeps no
// goroutine blocked per task in flight. A backend whose executor
// implements it calls StartTask instead of RunTask.
//
// StartTask must not block for long (it may wait for a connection's send
// buffer, not for the work). When it cannot start the task so (its
// worker is not connected yet), it returns false without calling done, and
// the backend runs the task with RunTask instead. When it returns true,
// done is called exactly once, on any goroutine, possibly before
// StartTask returns, but never on the goroutine calling StartTask while it
// runs; it must not block for long either. Cancelling ctx cancels the
// work and, as RunTask returns, calls done with ctx.Err() at once.
//
// Once it has called done, the starter must not use ctx, info or done
// again, nor keep a watch on ctx (stop what it registered with
// context.AfterFunc before it calls done): the backend may reuse them for
// another task.
type TaskStarter interface {
	StartTask(ctx context.Context, name string, arg Value, info *RuntimeInfo, done TaskDone) bool
}

// TaskDone receives the result of a task started with a [TaskStarter].
type TaskDone interface {
	TaskDone(v Value, err error)
}

// TaskDoneHolder is a TaskDone that can hold back waking the goroutines
// that wait for the result. A TaskStarter that delivers many results in
// a row (a worker connection's reader, with a burst of replies) calls
// TaskDoneHeld instead of TaskDone for each, then Flush on the returned
// Flusher (the same comparable value, such as a pointer, for the results
// of one backend; nil when nothing was held) once it has
// delivered what it has, before it waits for more: a goroutine waiting
// for several of the results is then woken once, not once per result.
// The starter must call Flush promptly (the waiters wait for it); it may
// call it on any goroutine, and more than once.
type TaskDoneHolder interface {
	TaskDone
	TaskDoneHeld(v Value, err error) Flusher
}

// Flusher wakes the waiters a TaskDoneHolder held back.
type Flusher interface {
	Flush()
}

// Backend is the driver interface.
//
// Submissions (SubmitTask, CallActor, CreateActor, CreatePlacementGroup)
// validate their input and reject infeasible requests at once; otherwise
// they return an ID at once and the work proceeds asynchronously.
// Failures of the work itself are reported by Get on its object.
//
// Calls from garbage collection: package ray frees the objects of dropped
// refs, and removes the group of a slice reservation that became
// unreachable unreleased, from cleanups registered with runtime.AddCleanup.
// Those cleanups never call the backend themselves: they queue the work
// for one goroutine per cluster, which calls Free (batching the IDs of
// many refs into one call) and RemovePlacementGroup. So a backend may take
// locks and make network calls in Free and RemovePlacementGroup without
// stalling the Go runtime's cleanup goroutines; it must only not assume
// that a dropped ref is freed at once, nor in the order refs were dropped.
type Backend interface {
	// Start hands the backend its executor. ray.NewCluster calls it once,
	// before any other method.
	Start(ctx context.Context, exec Executor) error

	// SubmitTask queues a task and returns the ID of its result.
	SubmitTask(ctx context.Context, spec *TaskSpec) (ObjectID, error)
	// Put stores a value and returns its ID.
	Put(ctx context.Context, v Value) (ObjectID, error)
	// Get waits for an object and returns its value or its error.
	Get(ctx context.Context, id ObjectID) (Value, error)
	// Wait blocks until at least n of ids are ready (done or failed) or ctx
	// ends, and reports which are ready. On ctx's end it returns the ready
	// set so far and ctx.Err().
	Wait(ctx context.Context, ids []ObjectID, n int) (ready []bool, err error)
	// Free drops the caller's reference to objects. The backend deletes an
	// object once no reference and no pending dependent remains.
	Free(ids ...ObjectID)

	// CreateActor schedules an actor.
	CreateActor(ctx context.Context, spec *ActorSpec) (ActorID, error)
	// CallActor queues a method call and returns the ID of its result.
	CallActor(ctx context.Context, spec *CallSpec) (ObjectID, error)
	// ActorReady waits until the actor's constructor has returned.
	ActorReady(ctx context.Context, id ActorID) error
	// KillActor kills an actor; it is not restarted. Its queued and running
	// calls fail with ActorDied. Killing a dead actor is not an error.
	KillActor(ctx context.Context, id ActorID) error
	// NamedActor finds a live actor by name.
	NamedActor(ctx context.Context, name string) (ActorID, string, error)

	// CreatePlacementGroup queues a placement group for gang placement.
	CreatePlacementGroup(ctx context.Context, spec *PlacementGroupSpec) (PlacementGroupID, error)
	// PlacementGroupReady waits until every bundle is placed.
	PlacementGroupReady(ctx context.Context, id PlacementGroupID) error
	// RemovePlacementGroup releases the group's resources. Queued work
	// pinned to it fails with ErrPlacementGroupRemoved; running tasks have
	// their context cancelled and their results fail the same way; actors in
	// it are killed. Removing twice is not an error.
	RemovePlacementGroup(ctx context.Context, id PlacementGroupID) error

	// Close stops the backend: queued and running work fails with ErrClosed,
	// every goroutine it started has returned when Close returns. Close is
	// idempotent.
	Close() error
}

// ArgSubmitter is implemented by backends that take a task's input beside
// its spec, so that a caller can submit many tasks with one immutable
// spec (package ray keeps one per registered task, for submissions
// without options), saving an allocation per task. SubmitTaskArg is
// SubmitTask of spec with its Arg replaced by arg; spec.Arg is ignored.
// The backend may keep spec for the task's life but must not modify it;
// the caller must not modify it either once submitted, since the backend
// may remember what it checked of a spec submitted again.
type ArgSubmitter interface {
	SubmitTaskArg(ctx context.Context, spec *TaskSpec, arg Arg) (ObjectID, error)
}

// CallArgSubmitter is ArgSubmitter for actor calls: CallActorArg is
// CallActor of spec with its Arg replaced by arg (spec.Arg is ignored), so
// that a caller can make many calls of one method of one actor with one
// immutable spec (package ray keeps one per actor handle and method). The
// backend may keep spec for the call's life but must not modify it.
type CallArgSubmitter interface {
	CallActorArg(ctx context.Context, spec *CallSpec, arg Arg) (ObjectID, error)
}

// NativeValues is implemented by in-process backends that can carry
// unencoded Go values in Value.Native. ray.Options.DisableCodec requires it.
type NativeValues interface {
	SupportsNativeValues() bool
}

// RuntimeInfoKey is the context key under which the *RuntimeInfo of running
// work is stored; ray.Runtime reads it. Backends may store it with
// context.WithValue or return it from their own context's Value method.
type RuntimeInfoKey struct{}

// RuntimeInfoFrom returns the *RuntimeInfo stored in ctx. It may be
// shared with other work that runs in the same place (a worker process
// keeps one per distinct value): read it, do not modify it.
func RuntimeInfoFrom(ctx context.Context) (*RuntimeInfo, bool) {
	info, ok := ctx.Value(RuntimeInfoKey{}).(*RuntimeInfo)
	return info, ok && info != nil
}
