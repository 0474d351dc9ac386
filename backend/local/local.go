// Package local is an in-process simulator of a cluster of CPU nodes and GKE
// TPU node pools, and the default goray backend for examples and tests.
//
// It is a real scheduler, not a stub: it accounts every node's resources,
// matches label selectors, gang-places placement groups (PACK, SPREAD,
// STRICT_PACK, STRICT_SPREAD) all-or-nothing, queues work it cannot place yet
// without starving large requests, and rejects at once, with the reason,
// requests that no node could ever hold. Tasks, actor constructors and actor
// calls run on goroutines. Arguments and results are encoded by the cluster's
// codec as on a real cluster, unless the cluster disables it.
//
// # Building a cluster
//
// A [ClusterSpec] lists nodes (with counts, resources and labels) and TPU
// slices; [LoadClusterSpec] reads the same from a JSON file. [New] builds the
// backend; ray.NewCluster starts it.
//
// # TPU slices
//
// TPUSliceSpec adds GKE-style TPU node pools: one node per host, labelled as
// GKE and the TPU webhook label real hosts (tpu.HostLabels), holding its
// chips as the TPU resource. The backend finds slices from those labels, so
// nodes labelled by hand work too. [Backend.ReserveSlices] (used by
// ray.NewSlicePlacementGroup) reserves every host of N intact, idle slices
// of one shape in one step, or queues first come, first served per shape;
// it never holds part of a request. Its cost does not grow with the
// cluster: free slices sit in a heap per shape.
//
// Hosts also carry Ray's per-host resources (tpu.HostResources:
// TPU-<pod type>-head: 1 on worker 0, and <slice name>: 1 with
// TPUSliceSpec.NameResource), so Ray-style reservations through those
// resources work. A request with Subslice
// reserves one sub-slice of a slice instead (Ray's
// subslice_placement_group), its env rewritten to the sub-slice. Bundles
// smaller than a host get per-process env: a v7x host's two processes
// (tpu.ProcessEnv) or Ray's partial-host TPU_VISIBLE_CHIPS.
//
// # Faults
//
// [Backend.KillNode] kills a node: its running tasks fail with Unavailable
// and are retried per their retry options, its actors restart elsewhere per
// their max restarts, and placement group bundles on it are placed again.
// [Backend.RestartNode] brings it back empty. [Backend.PreemptSlice] kills
// every host of a TPU slice at once.
//
// A host of a reserved TPU slice that dies fails the reservation as a
// whole: every task and actor in its bundles fails at once with
// Unavailable naming the host (the other hosts would hang in their first
// collective), nothing more runs in it, and the slice is not reserved again
// until all its hosts are back.
//
// # Limits
//
// Input cannot make the simulator grow without bound or stall: clusters
// have at most [MaxNodes] nodes, placement groups at most
// backend.MaxBundles bundles (validated before the scheduler lock is
// taken), resource amounts at most backend.MaxAmount. Scheduling classes
// (one per distinct resources, selector and placement) are dropped once
// idle; the causes of the last [TombstoneWindow] dead actors and removed
// groups are kept, older ones answer with the right code but no cause.
// Encoded inputs and outputs larger than Options.MaxMessageSize fail with
// ResourceExhausted in process as they do on the wire.
//
// # Concurrency
//
// A *Backend is safe for concurrent use. One mutex guards the scheduler;
// user code never runs under it.
package local

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/google/wire"

	"github.com/goray-dev/goray/backend"
)

// Options configures a Backend. A nil *Options means the defaults.
type Options struct {
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// StarvationLimit is how many younger requests may overtake a queued
	// request before the scheduler holds back the nodes it could use, so
	// that large requests are not starved by a stream of small ones. 0
	// means 64.
	StarvationLimit int
	// Processes, if set, runs user code in worker processes on loopback
	// instead of on goroutines of this process (see ProcessOptions).
	Processes *ProcessOptions
	// MaxMessageSize bounds, in the in-process mode, one encoded input or
	// output of a task, actor constructor or call, as worker processes
	// bound their messages (ProcessOptions.MaxMessageSize in that mode):
	// a larger one fails its work with ResourceExhausted, so a value too
	// large for a cluster fails in tests too. 0 means 64 MiB
	// (worker.DefaultMaxMessageSize).
	MaxMessageSize int
}

// Set is the Wire provider set of this backend: it provides a *Backend from a
// ClusterSpec and *Options, bound to backend.Backend.
var Set = wire.NewSet(New, wire.Bind(new(backend.Backend), new(*Backend)))

// Backend is the in-process simulated cluster. Create it with [New]; its zero
// value is not usable.
type Backend struct {
	log         *slog.Logger
	starveLimit int
	procOpts    *ProcessOptions // multi-process mode (process.go); nil: in process
	msgLimit    int             // in-process message-size limit (msglimit.go)

	mu       sync.Mutex
	exec     backend.Executor
	started  bool
	closed   bool
	closedCh chan struct{}
	wg       sync.WaitGroup

	resNames []string
	resIndex map[string]int
	nodes    []*node
	byName   map[string]*node
	cursor   int
	epoch    uint64 // bumped whenever the set of live nodes changes

	nextID  uint64
	objects map[backend.ObjectID]*object

	actors     map[backend.ActorID]*actor
	actorNames map[string]*actor

	pgs        map[backend.PlacementGroupID]*pgroup
	removedPGs *tombstones[backend.PlacementGroupID] // the error of work pinned to each removed group (tombstone.go)
	deadActors *tombstones[backend.ActorID]          // why each dead actor died
	pendingPGs []*pgroup

	classes      map[string]*class
	classSweepAt int // sweep idle classes when there are this many (sched.go)
	active       []*class
	seq          uint64
	queued       int
	running      int

	slices *sliceIndex
	pool   *pool
	// inline is set while finishTask schedules: the first task started
	// then goes to inlineNext, for finishTask's goroutine to run.
	inline     bool
	inlineNext *taskCtx
	// inlineCalls is set while finishCall dispatches: the first call
	// started then goes to inlineCall.
	inlineCalls bool
	inlineCall  *callRun
	ops         map[opKey]string // cached operation names for errors
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.Snapshotter = (*Backend)(nil)
var _ backend.FaultInjector = (*Backend)(nil)
var _ backend.SliceReserver = (*Backend)(nil)

type node struct {
	idx    int
	name   string
	labels map[string]string
	env    map[string]string
	capac  []int64
	free   []int64
	alive  bool
	// restarting: dead, but its worker process is being restarted
	// (multi-process mode), so work it could hold queues instead of
	// failing as Infeasible.
	restarting bool
	running    map[*task]struct{}
	actors     map[*actor]struct{}
	bundles    map[*bundle]struct{}
}

// New builds a simulated cluster from spec. It fails with InvalidArgument
// for an empty spec, duplicate or empty node names, negative resources or
// invalid TPU slices.
func New(spec ClusterSpec, opts *Options) (*Backend, error) {
	if opts == nil {
		opts = &Options{}
	}
	defs, err := spec.expand()
	if err != nil {
		return nil, err
	}
	b := &Backend{
		log:          opts.Logger,
		starveLimit:  opts.StarvationLimit,
		procOpts:     opts.Processes,
		msgLimit:     opts.MaxMessageSize,
		closedCh:     make(chan struct{}),
		resIndex:     map[string]int{},
		byName:       map[string]*node{},
		objects:      map[backend.ObjectID]*object{},
		actors:       map[backend.ActorID]*actor{},
		actorNames:   map[string]*actor{},
		pgs:          map[backend.PlacementGroupID]*pgroup{},
		removedPGs:   newTombstones[backend.PlacementGroupID](TombstoneWindow),
		deadActors:   newTombstones[backend.ActorID](TombstoneWindow),
		classes:      map[string]*class{},
		classSweepAt: minClassSweep,
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.starveLimit <= 0 {
		b.starveLimit = 64
	}
	names := map[string]bool{backend.CPU: true, backend.Memory: true, backend.TPU: true}
	for _, d := range defs {
		for k := range d.resources {
			names[k] = true
		}
	}
	b.resNames = slices.Sorted(maps.Keys(names))
	for i, n := range b.resNames {
		b.resIndex[n] = i
	}
	for i, d := range defs {
		n := &node{
			idx: i, name: d.name, labels: d.labels, env: d.env, alive: true,
			capac:   b.vector(d.resources),
			running: map[*task]struct{}{}, actors: map[*actor]struct{}{}, bundles: map[*bundle]struct{}{},
		}
		if n.labels == nil {
			n.labels = map[string]string{}
		}
		n.free = slices.Clone(n.capac)
		b.nodes = append(b.nodes, n)
		b.byName[n.name] = n
	}
	sliceDefs, err := discoverSlices(defs)
	if err != nil {
		return nil, err
	}
	b.slices = buildSliceIndex(b, sliceDefs)
	return b, nil
}

// vector converts known resources to a quantized vector; callers have
// checked the names.
func (b *Backend) vector(r backend.Resources) []int64 {
	v := make([]int64, len(b.resNames))
	for k, x := range r {
		if i, ok := b.resIndex[k]; ok {
			v[i] = backend.Quantize(x)
		}
	}
	return v
}

func (b *Backend) resources(v []int64) backend.Resources {
	r := backend.Resources{}
	for i, q := range v {
		if q != 0 {
			r[b.resNames[i]] = backend.Dequantize(q)
		}
	}
	return r
}

// checkResources validates amounts and names: a name no node has is
// Infeasible, naming the names the cluster has.
func (b *Backend) checkResources(op string, r backend.Resources) error {
	if err := r.Validate(); err != nil {
		return backend.Reop(backend.InvalidArgument, op, err)
	}
	for k, v := range r {
		if _, ok := b.resIndex[k]; !ok && v > 0 {
			return backend.Errorf(backend.Infeasible, op, "no node has resource %q; the cluster has %s", k, strings.Join(b.haveNames(), ", "))
		}
	}
	return nil
}

// SupportsNativeValues reports true: values may skip the codec in-process.
func (b *Backend) SupportsNativeValues() bool { return true }

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, exec backend.Executor) error {
	if exec == nil {
		return backend.Errorf(backend.InvalidArgument, "start backend", "nil executor")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return backend.Errorf(backend.FailedPrecondition, "start backend", "%w", backend.ErrClosed)
	}
	if b.started {
		return backend.Errorf(backend.FailedPrecondition, "start backend", "backend already started; a backend serves one cluster")
	}
	if b.procOpts != nil { // multi-process mode: user code runs in worker processes (process.go)
		pe, err := b.startProcesses(ctx, exec)
		if err != nil {
			return err
		}
		exec = pe
	} else {
		exec = &limitExecutor{Executor: exec, limit: b.msgLimit}
	}
	b.started = true
	b.exec = exec
	b.pool = newPool(&b.wg, b.closedCh, 256)
	return nil
}

// precheck returns the error for calls on an unstarted or closed backend.
// b.mu must be held.
func (b *Backend) precheck(op string) error {
	if b.closed {
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if !b.started {
		return backend.Errorf(backend.FailedPrecondition, op, "backend not started; pass it to ray.NewCluster")
	}
	return nil
}

// Close fails all queued and running work with ErrClosed, cancels the
// contexts of running user code and waits for it to return.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		b.stopProcesses() // multi-process mode (process.go)
		return nil
	}
	b.closed = true
	close(b.closedCh)
	// Cancel the contexts of all running user code.
	for _, n := range b.nodes {
		for t := range n.running {
			t.run.cancel()
		}
	}
	for _, a := range b.actors {
		if a.cancel != nil {
			a.cancel()
		}
	}
	closedErr := backend.Errorf(backend.FailedPrecondition, "close cluster", "%w", backend.ErrClosed)
	for _, o := range b.objects {
		if !o.done {
			b.completeLocked(o, backend.Value{}, closedErr)
		}
	}
	for _, pg := range b.pgs {
		pg.signal()
	}
	for _, a := range b.actors {
		a.signalReady()
	}
	b.active = nil
	b.pendingPGs = nil
	b.mu.Unlock()
	b.wg.Wait()
	b.stopProcesses() // multi-process mode (process.go): after running work returned
	return nil
}

// op returns the cached operation name prefix+name, for errors. b.mu must
// be held.
func (b *Backend) op(prefix, name, method string) string {
	key := opKey{prefix, name, method}
	if s, ok := b.ops[key]; ok {
		return s
	}
	if b.ops == nil {
		b.ops = map[opKey]string{}
	}
	s := prefix + name
	if method != "" {
		s += "." + method
	}
	if len(b.ops) < maxCachedOps { // names need not be registered: bound the cache
		b.ops[key] = s
	}
	return s
}

type opKey struct{ prefix, name, method string }

const maxCachedOps = 4096

func (b *Backend) newID() uint64 {
	b.nextID++
	return b.nextID
}

// haveNames lists the resources some node has.
func (b *Backend) haveNames() []string {
	var out []string
	for i, name := range b.resNames {
		for _, n := range b.nodes {
			if n.capac[i] > 0 {
				out = append(out, name)
				break
			}
		}
	}
	return out
}
