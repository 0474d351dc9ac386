// Package cluster is goray's cluster runtime, shared by every backend: the
// scheduler, object store, dependency resolution, retries, actor mailboxes
// and restarts, the placement-group solver, the TPU slice index and each
// host's reservation env, behind two seams.
//
// A new backend implements a [NodeSource] (where nodes come from and go:
// their names, resources and labels; add, drain, kill and restore) and a
// [Runner] (how work runs on a node: goroutines, worker processes, pods);
// [New] turns the two into a [Runtime], which is a backend.Backend with
// snapshots, fault injection and TPU slice reservations.
//
// Two backends are built on it: backend/local (its ClusterSpec becomes a
// static node source; a goroutine runner or a worker-process runner) and
// backend/kubernetes (Kubernetes nodes and Leases; a pod runner). It is
// public so that a backend can be written outside this repository
// (docs/backends.md).
//
// # Life of a runtime
//
// New builds the runtime; nothing runs yet. Options.Nodes, when the
// source knows its nodes up front, puts them in the node table at once
// (Snapshot and Slices show them before Start). Start (ray.NewCluster
// calls it) starts the runner (Runner.Start wraps the program's executor),
// runs the source (NodeSource.Run, on a goroutine, until Close), waits for
// its first nodes if it is a [Syncer], then brings those nodes up on the
// runner (Runner.NodeUp, concurrently); an error from any step fails
// Start and undoes the rest. Close fails queued work, cancels and waits
// for running user code, stops the source, ends every slice claim and
// closes the runner.
//
// # Node sources
//
// A source reports nodes to the [NodeSink] Run is given: every node that
// exists when it starts, then each change. A node reported again after it
// was lost comes back empty and idle; a node reported after Start is
// brought up on the runner and joins scheduling at once, with resource
// names the cluster has not seen before. TPU slices are not reported
// separately: a TPU host says which host of which slice it is as a typed
// [TPUHost] (slice name, shape, worker ID), and the runtime groups hosts
// into slices by it; a slice joins the index once all its hosts are in.
// The source parses its own world's facts once, at the edge (the
// Kubernetes source reads GKE's node labels; a static list of TPU VMs
// would read its file). [CheckSlices] runs the runtime's checks on a list
// of nodes, so a static source can refuse a bad spec when it is built.
// A node may carry an opaque Handle for the runner (the Kubernetes node a
// runtime node is on now); claims carry their hosts' handles.
//
// The runtime's KillNode and RestartNode (backend.FaultInjector) and
// PreemptSlice go through the source (Kill, Restore), which reports the
// change back; a draining node (NodeSink.NodeDraining) takes no new work
// and is lost once idle.
//
// # Runners
//
// A runner turns the program's executor into one that runs work on the
// node named in each call's backend.RuntimeInfo.Node, and reports a node
// whose worker is lost through the [LostFunc] Start gives it: the runtime
// fails and retries the work that ran there, as for a lost node. A cause
// marked [ErrRestarting] says the runner is restarting the worker, so work
// only that node can hold queues for it; the runner brings the node back
// through its source (NodeSource.Restore), or reports it lost again
// without the mark when it gives up.
//
// # Shared slices
//
// A source whose TPU slices other drivers share implements
// [SliceClaimer]: a slice reservation picks free slices (or one free
// sub-slice) from the index, claims them (ClaimSlices; a sub-slice as
// its parent slice with the sub-slice's hosts, Claim.Subslice set)
// outside the runtime's lock, and is granted only if the claim succeeds;
// until then nothing else
// picks what it picked. A [HeldError] (ResourceExhausted)
// marks the slices it names as held elsewhere for Options.ClaimRetry; the
// request is queued again at the head and takes other intact slices, or
// waits, within its context; so is a request whose claim (or Reserved)
// failed while a host of what it picked went down. Any other error fails
// the request.
// ReleaseSlices is called exactly once per granted claim, on every path
// (RemovePlacementGroup, a caller that gave up after the claim, Close);
// the released slices and sub-slice hosts are reserved again only after
// it has returned.
//
// A runner that starts a worker per reserved host implements
// [ClaimRunner]: Reserved is called after the claim and before the grant
// with each host's env, and Released once the reservation ends, before
// its claim is released. An error from Reserved releases the claim and
// fails the request (unless a picked host went down meanwhile, as above).
//
// # Concurrency
//
// A *Runtime is safe for concurrent use. One mutex guards the scheduler;
// user code, the source's and the runner's methods never run under it.
// The sink's methods take it briefly and never block on user code.
package cluster
