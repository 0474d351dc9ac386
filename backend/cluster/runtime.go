package cluster

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// Options configures a Runtime.
type Options struct {
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// StarvationLimit is how many younger requests may overtake a queued
	// request before the scheduler holds back the nodes it could use, so
	// that large requests are not starved by a stream of small ones. 0
	// means 64.
	StarvationLimit int
	// NativeValues is what SupportsNativeValues reports: true when user
	// code runs in this process (values may skip the codec).
	NativeValues bool
	// Nodes are nodes known when the runtime is built (a static source's),
	// in the node table from New on, so that Snapshot and Slices show them
	// before Start. The source reports them again from Run.
	Nodes []Node
	// ClaimRetry is how long slices a SliceClaimer said are held by
	// another driver stay out of reservations before the runtime tries
	// them again; 0 means 1s.
	ClaimRetry time.Duration
	// HostIdle is how long a TPU host claimed for work outside slice
	// reservations (see ChipHolder) stays claimed once nothing runs on
	// it, so that a run of short tasks does not start and stop its worker
	// for each; 0 means 2s.
	HostIdle time.Duration
	// WaitWarning is how long a slice reservation, placement group, task
	// or actor may wait to start before the runtime logs a warning
	// through Logger naming what waits and why (then again at twice the
	// age, and so on, at most every 5 minutes); 0 means
	// DefaultWaitWarning (10s), negative turns the warnings off. Without
	// a Logger nothing is watched.
	WaitWarning time.Duration
}

// Runtime is the cluster runtime: the scheduler, object store, actors,
// placement groups and TPU slices of one cluster whose nodes come from a
// [NodeSource] and whose work runs through a [Runner]. Build it with
// [New]; it implements backend.Backend, backend.Snapshotter,
// backend.FaultInjector and backend.SliceReserver.
type Runtime struct {
	log          *slog.Logger
	starveLimit  int
	nativeValues bool
	source       NodeSource
	runner       Runner
	claimer      SliceClaimer // source's, or nil (claim.go)
	claimRunner  ClaimRunner  // runner's, or nil (claim.go)
	// noLooseChips: the runner's workers outside slice reservations hold
	// no TPU chips (ChipHolder) and the runtime cannot claim hosts for
	// them, so TPU work there is refused (chips.go).
	noLooseChips bool
	// hostClaims: the same runner, with a SliceClaimer source and a
	// ClaimRunner: TPU work outside slice reservations runs on hosts this
	// driver claims for it (hostclaim.go).
	hostClaims bool
	claimRetry time.Duration
	hostIdle   time.Duration // Options.HostIdle (hostclaim.go)
	heldTimer  *time.Timer   // retries slices held elsewhere (claim.go)
	waitWarn   time.Duration // Options.WaitWarning, or <= 0 for none (waitwarn.go)
	waitClock  seqClock      // guarded by mu

	mu   sync.Mutex
	exec backend.Executor
	// starter is exec when it can start tasks without a goroutine
	// waiting for each (worker processes), else nil.
	starter  backend.TaskStarter
	starting bool // Start is in progress or done
	started  bool
	synced   bool // the source's first nodes are in; later ones go to the runner at once
	closed   bool
	closedCh chan struct{}
	wg       sync.WaitGroup
	shutdown chan struct{}      // closed when Close has finished
	runCtx   context.Context    // ends when Close begins: the source's Run, NodeUp calls
	runStop  context.CancelFunc //
	srcDone  chan struct{}      // closed when the source's Run has returned; nil before Start
	bg       sync.WaitGroup     // NodeUp calls and claim releases, waited for by Close

	resNames []string
	resIndex map[string]int
	nodes    []*node
	byName   map[string]*node
	cursor   int
	epoch    uint64 // bumped whenever the set of live nodes changes

	nextID  uint64
	objects objTable

	actors     map[backend.ActorID]*actor
	actorNames map[string]*actor

	pgs        map[backend.PlacementGroupID]*pgroup
	removedPGs *tombstones[backend.PlacementGroupID] // the error of work pinned to each removed group (tombstone.go)
	deadActors *tombstones[backend.ActorID]          // why each dead actor died
	pendingPGs []*pgroup

	classes      map[string]*class
	classSweepAt int        // sweep idle classes when there are this many (sched.go)
	lastClass    classCache // the class of the last plain request (classcache.go)
	active       []*class
	seq          uint64
	// schedBlockers and schedWaiting are schedule's scratch lists, in use
	// while scheduling is set.
	schedBlockers, schedWaiting []blocker
	scheduling                  bool
	queued                      int
	running                     int
	failures                    admission.FailureRing // recent failed attempts (failures.go)

	slices *sliceIndex
	pool   *pool
	// inline is set while finishTask schedules: the first task started
	// then goes to inlineNext, for finishTask's goroutine to run.
	inline     bool
	inlineNext *taskCtx
	// holdWakes is set while a result delivered held completes
	// (taskCtx.TaskDoneHeld): the wake-up of its Get is queued in
	// heldWakes for Flush instead of sent.
	holdWakes  bool
	heldWakes  []heldWake
	spareWakes []heldWake // a flushed heldWakes, kept for reuse
	// failed, if set, is closed (and cleared) when an object completes
	// with an error: the WaitAll calls waiting wake then (objects.go).
	failed chan struct{}
	// lastHanded is the task run last handed to the pool, the one a Get
	// may run itself (getclaim.go).
	lastHanded *taskCtx
	// inlineCalls is set while finishCall dispatches: the first call
	// started then goes to inlineCall.
	inlineCalls bool
	inlineCall  *callRun
	// freeCalls are finished call records whose contexts no code kept
	// (callctx.go), for the next calls; at most maxFreeCalls.
	freeCalls []*call
	// freeTasks are finished task records that nothing reaches any more
	// (taskreuse.go), for the next tasks; at most maxFreeTasks.
	freeTasks  []*task
	ops        map[opKey]string // cached operation names for errors
	lastSubmit [2]string        // the last task name submitted and its op (submitOp)
	// lastSpec is the spec SubmitTaskArg took last, and lastSpecClass
	// its class: the same immutable spec submitted again skips the
	// checks it passed (its name registered, its class found).
	lastSpec      *backend.TaskSpec
	lastSpecClass *class
	counters      counters // for metrics (counters.go)
}

var _ backend.Backend = (*Runtime)(nil)
var _ backend.Snapshotter = (*Runtime)(nil)
var _ backend.FaultInjector = (*Runtime)(nil)
var _ backend.SliceReserver = (*Runtime)(nil)
var _ NodeSink = (*sink)(nil)

type node struct {
	idx    int
	name   string
	labels map[string]string
	env    map[string]string
	spec   Node // as the source reported it
	// slice is the TPU slice whose name resource the node holds (in
	// sliceCol), or "".
	slice string
	capac []int64
	free  []int64
	chips uint64 // the TPU chips taken (chips.go)
	// hold is this driver's claim of the host for TPU work outside slice
	// reservations, or nil (hostclaim.go).
	hold  *hostHold
	alive bool
	// restarting: dead, but its worker is being restarted (the runner
	// reported it lost with ErrRestarting), so work it could hold queues
	// instead of failing as Infeasible.
	restarting bool
	// draining: alive, but takes no new work; lost once idle.
	draining bool
	running  taskSet
	// actors and bundles are made on first use: most nodes of a large
	// TPU cluster never hold either.
	actors  map[*actor]struct{}
	bundles map[*bundle]struct{}
}

func (n *node) addActor(a *actor) {
	if n.actors == nil {
		n.actors = map[*actor]struct{}{}
	}
	n.actors[a] = struct{}{}
}

func (n *node) addBundle(bu *bundle) {
	if n.bundles == nil {
		n.bundles = map[*bundle]struct{}{}
	}
	n.bundles[bu] = struct{}{}
}

// New builds a runtime whose nodes come from source and whose work runs
// through runner. Nothing starts until Start (ray.NewCluster calls it):
// Start starts the runner, runs the source and waits for its first nodes.
// If source implements [SliceClaimer] or [Syncer], or runner implements
// [ClaimRunner], the runtime uses them.
func New(source NodeSource, runner Runner, opts Options) (*Runtime, error) {
	if source == nil || runner == nil {
		return nil, backend.Errorf(backend.InvalidArgument, "create runtime", "nil node source or runner; both are required")
	}
	b := &Runtime{
		log:          opts.Logger,
		starveLimit:  opts.StarvationLimit,
		nativeValues: opts.NativeValues,
		source:       source,
		runner:       runner,
		closedCh:     make(chan struct{}),
		shutdown:     make(chan struct{}),
		resIndex:     map[string]int{},
		byName:       map[string]*node{},
		actors:       map[backend.ActorID]*actor{},
		actorNames:   map[string]*actor{},
		pgs:          map[backend.PlacementGroupID]*pgroup{},
		removedPGs:   newTombstones[backend.PlacementGroupID](TombstoneWindow),
		deadActors:   newTombstones[backend.ActorID](TombstoneWindow),
		classes:      map[string]*class{},
		classSweepAt: minClassSweep,
		slices:       newSliceIndex(),
	}
	b.runCtx, b.runStop = context.WithCancel(context.Background())
	b.claimRetry = cmp.Or(opts.ClaimRetry, time.Second)
	b.hostIdle = cmp.Or(opts.HostIdle, 2*time.Second)
	b.waitWarn = cmp.Or(opts.WaitWarning, DefaultWaitWarning)
	b.claimer, _ = source.(SliceClaimer)
	b.claimRunner, _ = runner.(ClaimRunner)
	if h, ok := runner.(ChipHolder); ok && !h.ChipsOutsideReservations() {
		b.hostClaims = b.claimer != nil && b.claimRunner != nil
		b.noLooseChips = !b.hostClaims
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.starveLimit <= 0 {
		b.starveLimit = 64
	}
	for _, name := range []string{backend.CPU, backend.Memory, backend.TPU} {
		b.addResourceName(name)
	}
	b.resNames = append(b.resNames, sliceColName) // sliceCol, reached through slice names only
	// The nodes of a StaticSource, which nobody modifies once it has
	// them, are kept rather than copied (as the source's reports are).
	copyNodes := true
	if s, ok := source.(*StaticSource); ok && len(opts.Nodes) > 0 && len(s.nodes) == len(opts.Nodes) && &s.nodes[0] == &opts.Nodes[0] {
		copyNodes = false
	}
	for _, n := range opts.Nodes {
		if b.byName[n.Name] != nil {
			return nil, backend.Errorf(backend.InvalidArgument, "create runtime", "duplicate node name %q", n.Name)
		}
		b.addNodeLocked(n, copyNodes)
	}
	return b, nil
}

// addResourceName makes name a resource of the cluster's vectors: it is
// appended, and every node's vectors grow. Vectors built before (demands)
// are shorter, which fits, add and sub allow. b.mu must be held.
func (rt *Runtime) addResourceName(name string) {
	if _, ok := rt.resIndex[name]; ok {
		return
	}
	rt.resIndex[name] = len(rt.resNames)
	rt.resNames = append(rt.resNames, name)
	for _, n := range rt.nodes {
		n.capac = append(n.capac, 0)
		n.free = append(n.free, 0)
	}
}

// vector converts known resources to a quantized vector; callers have
// checked the names.
func (rt *Runtime) vector(r backend.Resources) []int64 {
	v := make([]int64, len(rt.resNames))
	for k, x := range r {
		if i, ok := rt.resIndex[k]; ok {
			v[i] = backend.Quantize(x)
		}
	}
	return v
}

// vectorSpare is vector with spare capacity of extra elements after it
// (which nothing may append into: the caller uses it).
func (rt *Runtime) vectorSpare(r backend.Resources, extra int) []int64 {
	v := make([]int64, len(rt.resNames), len(rt.resNames)+extra)
	for k, x := range r {
		if i, ok := rt.resIndex[k]; ok {
			v[i] = backend.Quantize(x)
		}
	}
	return v
}

// checkResources validates amounts and names: a name no node has is
// Infeasible, naming the names the cluster has.
func (rt *Runtime) checkResources(op string, r backend.Resources) error {
	if err := r.Validate(); err != nil {
		return backend.Reop(backend.InvalidArgument, op, err)
	}
	for k, v := range r {
		if _, ok := rt.resIndex[k]; !ok && v > 0 {
			return backend.Errorf(backend.Infeasible, op, "no node has resource %q; the cluster has %s", k, strings.Join(rt.haveNames(), ", "))
		}
	}
	return nil
}

// SupportsNativeValues implements backend.Backend: Options.NativeValues.
func (rt *Runtime) SupportsNativeValues() bool { return rt.nativeValues }

// op returns the cached operation name prefix+name, for errors. b.mu must
// be held.
func (rt *Runtime) op(prefix, name, method string) string {
	key := opKey{prefix, name, method}
	if s, ok := rt.ops[key]; ok {
		return s
	}
	if rt.ops == nil {
		rt.ops = map[opKey]string{}
	}
	s := prefix + name
	if method != "" {
		s += "." + method
	}
	if len(rt.ops) < maxCachedOps { // names need not be registered: bound the cache
		rt.ops[key] = s
	}
	return s
}

type opKey struct{ prefix, name, method string }

// submitOp is b.op("submit task ", spec.Name, ""), with the last one kept
// at hand: submissions come in runs of one task. b.mu must be held.
func (rt *Runtime) submitOp(spec *backend.TaskSpec) string {
	if spec == nil {
		return "submit task"
	}
	if spec.Name != rt.lastSubmit[0] || rt.lastSubmit[1] == "" {
		rt.lastSubmit = [2]string{spec.Name, rt.op("submit task ", spec.Name, "")}
	}
	return rt.lastSubmit[1]
}

const maxCachedOps = 4096

func (rt *Runtime) newID() uint64 {
	rt.nextID++
	return rt.nextID
}

// haveNames lists the resources some node has; the TPU slices' names are
// summed up in one entry (sliceNamesPhrase).
func (rt *Runtime) haveNames() []string {
	var out []string
	for i, name := range rt.resNames {
		if i == sliceCol {
			continue
		}
		for _, n := range rt.nodes {
			if n.capac[i] > 0 {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	if p := rt.sliceNamesPhrase(); p != "" {
		out = append(out, p)
	}
	return out
}
