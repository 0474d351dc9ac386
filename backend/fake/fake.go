// Package fake is a synchronous, deterministic goray backend for unit tests
// of code that calls goray, in the spirit of client-go's fake clientset: it
// runs the real registered tasks and actors, records every call for
// assertions, and lets a test script results and failures per task name.
//
//	b := fake.New(nil)
//	c, err := ray.NewCluster(ctx, b, nil)
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { c.Close() })
//	b.FailNext("mypkg.fetch", 2, backend.Errorf(backend.Unavailable, "", "node lost"))
//	// ... exercise the code under test with c ...
//	calls := b.CallsTo("mypkg.fetch") // three attempts: two failures, one success
//
// # Semantics
//
// Work runs in the goroutine that submits it, before the submission
// returns: SubmitTask runs the task (retries included), CreateActor runs the
// constructor, CallActor runs the method, and Get then returns at once.
// Runs go through the [backend.Executor] given to Start, that is the real
// registered Go functions behind ray's codec, so arguments and results are
// encoded as on a real cluster (unless the cluster disables the codec: the
// fake implements [backend.NativeValues]). Object, actor and placement group
// IDs are assigned in call order from one counter, so a single-goroutine
// test sees the same IDs and the same call log on every run.
//
// Because a submission returns only once its work is over, code that
// submits work and only then lets it finish (closes a channel the task waits
// on, say) blocks on the fake where an asynchronous backend would not.
// Work that must run at the same time is submitted from goroutines of
// its own: package train does so for the ranks of a run, which meet at a
// rendezvous, so train.Fit runs on the fake with any number of workers. Work
// runs with a context of its own, which carries none of the submitter's
// values and is cancelled when the submitter's context ends (the submitter
// is blocked on the work), when the backend closes, or when the work's actor
// or placement group goes away. An actor's constructor gets the actor's
// context, which lives until the actor dies.
//
// What the fake checks, with the same error codes as backend/local: empty
// or unregistered names, negative resources, malformed label selectors,
// placement group strategies and bundles, placement into a missing or
// removed group, a bundle index out of range, work that does not fit the
// bundle it is pinned to, names of live actors, calls on dead actors,
// missing input objects, calls after Close.
//
// What it does not simulate: the fake has no nodes (work reports running on
// one virtual node, "fake"), so it does no resource accounting, does not
// match node selectors against labels, never queues, and never reports
// Infeasible for lack of capacity. Placement groups are placed as soon as
// they are created. There is no fault injection
// ([backend.FaultInjector]); a scripted failure with code Unavailable
// stands for a lost node instead. Use backend/local to test scheduling.
//
// # Retries
//
// A task attempt fails by a scripted failure (see below) or by its own
// error. Like backend/local, the fake retries a task, at once and in the
// same goroutine, when the failure has code Unavailable and came from a
// script or reactor (a simulated lost node), or has code TaskFailed and the
// task asked for [backend.TaskSpec.RetryOnError]; in both cases only while
// [backend.TaskSpec.MaxRetries] allows. Unlimited retries (MaxRetries < 0)
// stop after [Options.RetryLimit] attempts, so that a permanent scripted
// failure ends the test instead of hanging it. Each attempt is recorded
// and runs with its attempt number in its runtime info. Actor constructors
// and method calls are not retried (in Ray they are retried only when the
// actor restarts after a node failure, which the fake does not simulate).
//
// # Scripting
//
// Scripts are keyed by the registered name: a task's name, "class.method"
// for an actor method, or the class for an actor constructor. For each
// attempt the fake asks, in order:
//
//  1. the reactors ([Backend.PrependReactor]), most recently prepended
//     first; the first that handles the call decides its outcome;
//  2. the queue of [Backend.FailNext]: the next queued failure, if any;
//  3. [Backend.SetError]: a failure of every attempt;
//  4. [Backend.SetResult]: a result of every attempt;
//  5. otherwise the real registered function runs.
//
// A scripted error that is not a goray error becomes a TaskFailed error
// carrying a *[backend.TaskError] with the task's name and attempt, exactly
// as if the user code had returned it; a goray error (such as one built
// with [backend.Errorf]) is returned as it is. Actor constructors can only
// be made to fail: a scripted result for a constructor is an error, and a
// reactor that handles a constructor without an error lets the real one run.
//
// # Recording
//
// Every call of the backend's methods is recorded as a [Call], in order,
// except Start, Close, Snapshot and Free (which the garbage collector
// calls at unpredictable times through ray's object refs). A task attempt is
// one Call, so a task retried twice is three Calls with Attempt 0, 1 and 2;
// a rejected submission is one Call with Err set. [Backend.Calls],
// [Backend.CallsTo] and [Backend.CallsOf] read the log; [Call.DecodeArg] and
// [Call.DecodeResult] decode values with the fake's codec.
//
// # Errors
//
// Every error is a *[backend.Error] with a code of the closed set, or a
// context error returned unchanged, as the [backend.Backend] contract asks.
// Calls after Close fail with code FailedPrecondition matching
// [backend.ErrClosed].
//
// # Concurrency
//
// A *Backend is safe for concurrent use, and user code may submit nested
// work to the same backend: the fake holds its mutex only around its own
// bookkeeping, never while user code, reactors or scripts run. Calls of one
// actor are serialized (at most [backend.ActorSpec.MaxConcurrency] at once,
// in arrival order), as on a real cluster, and run in the callers'
// goroutines. Work submitted from several goroutines runs concurrently, so
// the call log of such a test is only as deterministic as the test.
//
// The fake starts no goroutine of its own. Close cancels the context of
// work still running in other goroutines and fails its results with
// ErrClosed, but does not wait for it: that work runs in its caller's
// goroutine, which the caller owns.
package fake

import (
	"context"
	"encoding/json"
	"maps"
	"sync"

	"github.com/google/wire"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// NodeName is the name of the fake's one virtual node, reported in runtime
// info and snapshots.
const NodeName = "fake"

// DefaultRetryLimit is the attempt cap of a task with unlimited retries
// when [Options.RetryLimit] is 0.
const DefaultRetryLimit = 100

// Codec encodes scripted results and decodes recorded values. ray.Codec
// (and so ray.JSON) satisfies it.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// Options configures a Backend. A nil *Options means the defaults.
type Options struct {
	// Codec must be the codec of the cluster the backend serves (see
	// ray.Options.Codec). nil means encoding/json, which is also ray's
	// default codec.
	Codec Codec
	// Env is the runtime env of all work (what ray.Runtime(ctx).Env
	// reads), before a placement group bundle's env is added to it.
	Env map[string]string
	// NodeLabels are the labels of the virtual node, reported to work in
	// its runtime info. Node selectors are not matched against them.
	NodeLabels map[string]string
	// RetryLimit caps the attempts of a task with unlimited retries
	// (negative MaxRetries). 0 means [DefaultRetryLimit].
	RetryLimit int
}

// Set is the Wire provider set of this backend: it provides a *Backend from
// *Options, bound to backend.Backend.
var Set = wire.NewSet(New, wire.Bind(new(backend.Backend), new(*Backend)))

// Backend is the fake backend. Create it with [New], or use its zero value,
// which behaves as New(nil). It serves one cluster: ray.NewCluster starts
// it. It is safe for concurrent use; see the package doc.
type Backend struct {
	opts Options // immutable after New

	mu      sync.Mutex
	exec    backend.Executor
	started bool
	closed  bool
	root    context.Context
	stop    context.CancelFunc

	nextID     uint64
	objects    map[backend.ObjectID]*object
	actors     map[backend.ActorID]*actor
	actorNames map[string]*actor
	groups     map[backend.PlacementGroupID]*group
	// TPU slice reservations (slice.go).
	reservations  []*reservation
	pendingSlices []*backend.PendingSliceRequest
	nextSlice     int
	running       map[*run]struct{}
	failures      admission.FailureRing // recent failed attempts, for Snapshot

	calls    []*Call
	scripts  map[string]*script
	reactors []reactorEntry
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Snapshotter  = (*Backend)(nil)
	_ backend.NativeValues = (*Backend)(nil)
)

// New returns a fake backend. It never fails; pass it to ray.NewCluster.
func New(opts *Options) *Backend {
	b := &Backend{}
	if opts != nil {
		b.opts = *opts
		b.opts.Env = maps.Clone(opts.Env)
		b.opts.NodeLabels = maps.Clone(opts.NodeLabels)
	}
	return b
}

// SupportsNativeValues reports true: the fake runs in-process, so a cluster
// may disable its codec (ray.Options.DisableCodec).
func (b *Backend) SupportsNativeValues() bool { return true }

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, exec backend.Executor) error {
	const op = "start backend"
	if exec == nil {
		return backend.Errorf(backend.InvalidArgument, op, "nil executor")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return closedErr(op)
	}
	if b.started {
		return backend.Errorf(backend.FailedPrecondition, op, "backend already started; a backend serves one cluster")
	}
	b.started = true
	b.exec = exec
	b.root, b.stop = context.WithCancel(context.Background())
	b.objects = map[backend.ObjectID]*object{}
	b.actors = map[backend.ActorID]*actor{}
	b.actorNames = map[string]*actor{}
	b.groups = map[backend.PlacementGroupID]*group{}
	b.running = map[*run]struct{}{}
	return nil
}

// Close closes the backend: every later call fails with ErrClosed, and work
// running in other goroutines has its context cancelled and its result
// failed with ErrClosed. The call log and scripts stay readable. Close is
// idempotent and always returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.stop != nil {
		b.stop()
	}
	err := closedErr("close cluster")
	for r := range b.running {
		r.abortLocked(err)
	}
	return nil
}

// precheckLocked returns the error of calls on an unstarted or closed
// backend. b.mu must be held.
func (b *Backend) precheckLocked(op string) error {
	if b.closed {
		return closedErr(op)
	}
	if !b.started {
		return backend.Errorf(backend.FailedPrecondition, op, "backend not started; pass it to ray.NewCluster")
	}
	return nil
}

func closedErr(op string) error {
	return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
}

// newIDLocked returns the next ID; objects, actors and placement groups
// share the counter, as in backend/local. b.mu must be held.
func (b *Backend) newIDLocked() uint64 {
	b.nextID++
	return b.nextID
}

func (b *Backend) codec() Codec {
	if b.opts.Codec == nil {
		return jsonCodec{}
	}
	return b.opts.Codec
}

func (b *Backend) retryLimit() int {
	if b.opts.RetryLimit <= 0 {
		return DefaultRetryLimit
	}
	return b.opts.RetryLimit
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// run is work running now: a task attempt or an actor call. Close, KillActor
// and RemovePlacementGroup abort it: its context is cancelled and its result
// becomes abort, whatever the user code returns.
type run struct {
	cancel context.CancelFunc
	group  backend.PlacementGroupID
	actor  *actor
	abort  error
	// name is the task or "class.method"; task is set for a task attempt.
	name string
	task bool
}

func (r *run) abortLocked(err error) {
	if r.abort == nil {
		r.abort = err
	}
	r.cancel()
}

// heldKey marks a run's context with the actors whose call slots the
// current call chain holds, so that a call that would wait for itself fails
// instead of deadlocking.
type heldKey struct{}

type held struct {
	actor backend.ActorID
	next  *held
}

func heldBy(ctx context.Context) *held {
	h, _ := ctx.Value(heldKey{}).(*held)
	return h
}

func (h *held) contains(id backend.ActorID) bool {
	for ; h != nil; h = h.next {
		if h.actor == id {
			return true
		}
	}
	return false
}

// runContext returns the context of one run: a child of parent (the
// backend's root, or an actor's context) that carries no value of the
// caller's context except the held actors, and that is also cancelled when
// the caller's context ends, since the caller is blocked on the run. Call
// the returned func when the run is over.
func runContext(caller, parent context.Context, self backend.ActorID) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	h := heldBy(caller)
	if self != 0 {
		h = &held{actor: self, next: h}
	}
	if h != nil {
		ctx = context.WithValue(ctx, heldKey{}, h)
	}
	stop := context.AfterFunc(caller, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// env returns the runtime env of work in a bundle with the given env.
func (b *Backend) env(bundle map[string]string) map[string]string {
	return admission.OverlayEnv(b.opts.Env, bundle)
}
