// Package local is an in-process simulator of a cluster of CPU nodes and GKE
// TPU node pools, and the default goray backend for examples and tests.
//
// A Backend is goray's cluster runtime (backend/cluster, shared by every
// backend) fed by a static node source, the nodes a [ClusterSpec] expands
// to, and run by one of two runners: goroutines of this process, behind
// the message-size limit, or worker processes (see [ProcessOptions]).
// This package is the spec, that source and those runners.
//
// The runtime is a real scheduler, not a stub: it accounts every node's
// resources, matches label selectors, gang-places placement groups (PACK,
// SPREAD, STRICT_PACK, STRICT_SPREAD) all-or-nothing, queues work it
// cannot place yet without starving large requests, and rejects at once,
// with the reason, requests that no node could ever hold. Arguments and
// results are encoded by the cluster's codec as on a real cluster, unless
// the cluster disables it.
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
	"log/slog"
	"time"

	"github.com/google/wire"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
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
	// WaitWarning is how long a slice reservation, placement group, task
	// or actor may wait to start before a warning naming what waits and
	// why goes to Logger (then again with backoff); 0 means 10s, negative
	// turns the warnings off (cluster.Options.WaitWarning).
	WaitWarning time.Duration
}

// TombstoneWindow is how many dead actors and removed placement groups
// keep their cause of death for errors; older ones answer with the right
// code but no cause.
const TombstoneWindow = cluster.TombstoneWindow

// Set is the Wire provider set of this backend: it provides a *Backend from a
// ClusterSpec and *Options, bound to backend.Backend.
var Set = wire.NewSet(New, wire.Bind(new(backend.Backend), new(*Backend)))

// Backend is the in-process simulated cluster: the cluster runtime over
// the spec's nodes. Create it with [New]; its zero value is not usable.
// Besides backend.Backend it implements backend.Snapshotter,
// backend.FaultInjector (through the static node source), backend.TaskCanceler
// and backend.SliceReserver.
//
// Those methods are the embedded [cluster.Runtime]'s (Start, SubmitTask,
// ..., KillNode, RestartNode, PreemptSlice, ReserveSlices, Slices, Close:
// see its documentation); the methods below are the simulator's own.
type Backend struct {
	*cluster.Runtime
	procs *procRunner // multi-process mode; nil in process
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.Snapshotter = (*Backend)(nil)
var _ backend.FaultInjector = (*Backend)(nil)
var _ backend.SliceReserver = (*Backend)(nil)

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
	nodes := make([]cluster.Node, len(defs))
	names := make([]string, len(defs))
	for i, d := range defs {
		nodes[i] = cluster.Node{Name: d.name, Resources: d.resources, Labels: d.labels, Env: d.env, TPU: d.tpu}
		names[i] = d.name
	}
	if err := cluster.CheckSlices("create local cluster", nodes); err != nil {
		return nil, err
	}
	src := cluster.NewStaticSource(nodes)
	b := &Backend{}
	var runner cluster.Runner = goroutineRunner{limit: opts.MaxMessageSize}
	if opts.Processes != nil {
		if b.procs, err = newProcRunner(*opts.Processes, opts.Logger, names, src.Restore); err != nil {
			return nil, err
		}
		runner = b.procs
	}
	rt, err := cluster.New(src, runner, cluster.Options{Logger: opts.Logger, StarvationLimit: opts.StarvationLimit, NativeValues: true, Nodes: nodes, WaitWarning: opts.WaitWarning})
	if err != nil {
		return nil, err
	}
	b.Runtime = rt
	return b, nil
}
