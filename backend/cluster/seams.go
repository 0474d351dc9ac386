package cluster

import (
	"context"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// Node is one node as a [NodeSource] reports it.
type Node struct {
	// Name is unique in the cluster and stable for the node's life.
	Name string
	// Resources is the node's capacity (backend.CPU, backend.TPU, ...).
	// A TPU host may hold a resource named after its own slice
	// (TPU.Slice), as Ray's <TPU_NAME>: 1 (tpu.HostResources): work
	// asking for it runs on that slice's hosts only, and it costs the
	// runtime one column however many slices there are. A name first
	// reported by a slice's host is that slice's: another node reporting
	// it later does not hold it (a warning is logged); a name some other
	// node reported first stays an ordinary resource.
	Resources backend.Resources
	// Labels are matched by node and bundle label selectors. TPU hosts
	// should carry the labels GKE and Ray give real hosts
	// (tpu.HostLabels), so that selectors written for GKE match; the
	// runtime itself reads the TPU field, not labels.
	Labels map[string]string
	// Env is added to the runtime env of all work on the node.
	Env map[string]string
	// TPU is set when the node is a host of a TPU slice: the runtime
	// groups hosts into slices by it, and a slice joins its index once
	// every host is in. Nil for a node without TPUs.
	TPU *TPUHost
	// Handle is the source's own handle of the node, opaque to the
	// runtime, for the runner: Runner.NodeUp gets it, and a [Claim] has
	// the handle of each claimed host (Kubernetes: the name of the
	// Kubernetes node, which changes when a host is replaced). A node
	// reported again after it was lost comes back with the new report's
	// Handle; its other fields stay as first reported.
	Handle any
}

// TPUHost says which host of which TPU slice a node is.
type TPUHost struct {
	// Slice names the slice, unique in the cluster (on GKE, the node
	// pool; Ray's TPU_NAME).
	Slice string
	// Shape is the slice's generation, topology and chips per host; the
	// node's backend.TPU capacity must equal Shape.ChipsPerHost.
	Shape tpu.SliceShape
	// WorkerID is the host's TPU_WORKER_ID, 0..Shape.Hosts()-1: the
	// hosts of one slice have distinct worker IDs.
	WorkerID int
}

// NodeSink receives a [NodeSource]'s reports. The runtime implements it
// (and passes it to Run); its methods take the runtime's lock briefly,
// never block on user code and may be called from any goroutine, but a
// source reports one node's changes in order. Reports before Start's sync
// fill the node table; reports after it are scheduled at once.
type NodeSink interface {
	// NodeAdded reports a new node, or a lost node that is back (empty and
	// idle). A node that is already up is left as it is.
	NodeAdded(n Node)
	// NodeDraining reports that a node takes no new work; what runs there
	// runs to its end, and the node is then lost.
	NodeDraining(name string)
	// NodeLost reports that a node is gone (cause, which may be nil, says
	// why, such as "host preempted"): its work fails with Unavailable and
	// is retried per the retry options, its actors restart elsewhere per
	// their max restarts, and the runner is told (Runner.NodeDown).
	NodeLost(name string, cause error)
}

// NodeSource is where a cluster's nodes come from and go: a static spec
// (backend/local), Kubernetes nodes (backend/kubernetes). It may also be a
// [Syncer] (Start waits for its first nodes) and a [SliceClaimer] (its
// slices are shared with other drivers).
type NodeSource interface {
	// Run reports every current node to sink, then each change, until ctx
	// ends; it returns after its last call to sink. The runtime calls it
	// once, from Start.
	Run(ctx context.Context, sink NodeSink) error
	// Add asks for a new node (a scale-up). Sources that cannot add nodes
	// return an Unimplemented error. The node is reported to the sink when
	// it exists.
	Add(ctx context.Context, n Node) error
	// Drain asks for a node to be drained and then removed.
	Drain(ctx context.Context, name string) error
	// Kill ends a node abruptly, as a host failure does (fault injection;
	// on Kubernetes, deleting its pod). Restore brings a killed node back.
	// Both report the change to the sink before they return (the
	// runtime's KillNode and RestartNode are synchronous through them);
	// NotFound names an unknown node.
	Kill(ctx context.Context, name string) error
	Restore(ctx context.Context, name string) error
}

// LostFunc is how a [Runner] reports that the worker of a node is gone
// (its process died, its connection or pod was lost): the runtime then
// treats the node as lost, as for [NodeSink.NodeLost] (without calling
// NodeDown back). A cause wrapping [ErrRestarting] says the runner
// restarts the worker by itself (see ErrRestarting).
type LostFunc func(node string, cause error)

// Runner is how work runs on a node: on goroutines of this process, in
// worker processes through package worker, in pods (backend/kubernetes).
type Runner interface {
	// Start wraps the program's executor (ray.NewExecutor) into the
	// executor the runtime calls for every task attempt, actor
	// construction and call. The returned executor runs each on the node
	// named by its backend.RuntimeInfo.Node and is safe for concurrent
	// use. lost reports workers that die. The runtime calls Start once,
	// from its own Start, before it runs the source.
	Start(ctx context.Context, exec backend.Executor, lost LostFunc) (backend.Executor, error)
	// NodeUp and NodeDown tell the runner which nodes exist, so that it
	// can start a node's worker (lazily or at once) and stop it. The
	// runtime's Start calls NodeUp for the source's first nodes,
	// concurrently, after Runner.Start, and fails if one fails; later
	// nodes (and lost nodes that are back) are brought up on a goroutine,
	// a failure logged. NodeDown follows NodeSink.NodeLost and must not
	// block.
	NodeUp(ctx context.Context, n Node) error
	NodeDown(name string)
	// Close stops every worker the runner started and returns when they
	// are gone.
	Close() error
}

// Claim is one slice reservation as the runtime grants it: the slices and
// their hosts, all or nothing.
type Claim struct {
	// ID is the reservation's ID (its placement group's ID), unique in the
	// driver.
	ID string
	// Slices are the slice names (TPUHost.Slice), in the order of
	// the request's slice indices; Hosts are the node names of each slice,
	// in worker-ID order. A sub-slice reservation is one slice, its parent,
	// with only the sub-slice's hosts, in the sub-slice's worker-ID order:
	// fewer hosts than the slice has.
	Slices []string
	Hosts  [][]string
	// Handles[i][j] is the [Node.Handle] of Hosts[i][j], as its source
	// last reported it.
	Handles [][]any
	// Subslice says the claim is of one sub-slice (SliceRequest.Subslice):
	// Slices holds its parent slice and Hosts only the sub-slice's hosts.
	Subslice bool
}

// SliceClaimer is an optional interface of a [NodeSource] whose slices are
// shared with other drivers (Kubernetes: one coordination.k8s.io Lease per
// slice). The runtime picks free slices from its index, then claims them
// outside its locks before it grants the reservation; a claim never
// blocks the runtime's other work. Sub-slice reservations
// (SliceRequest.Subslice) are claimed too, as their parent slice with the
// sub-slice's hosts (see Claim): the runtime may hold several sub-slice
// claims of one slice at once, on disjoint hosts, but never one with a
// whole-slice claim of the same slice, and it claims no host again until
// the release of its previous claim has returned.
type SliceClaimer interface {
	// ClaimSlices claims every slice of c for this driver, all or nothing:
	// on error nothing is held. An error with code backend.ResourceExhausted
	// means another driver holds one of them: the runtime treats the
	// slices the error names (see HeldError) as busy and tries other
	// slices or waits. Any other error fails the reservation.
	ClaimSlices(ctx context.Context, c Claim) error
	// ReleaseSlices ends a claim that ClaimSlices granted. The runtime
	// calls it on every path, once per granted claim, outside its lock,
	// with a context bounded to 30s; the slices are not claimed again
	// until it has returned. An error is logged.
	ReleaseSlices(ctx context.Context, c Claim) error
}

// HeldError is the error a [SliceClaimer] returns when slices are held by
// another driver. Its Unwrap gives a backend.ResourceExhausted error.
type HeldError struct {
	Slices []string // the slices held elsewhere
	Holder string   // the other holder's identity, when known
}

func (e *HeldError) Error() string {
	msg := "slices held by another driver: " + strings.Join(e.Slices, ", ")
	if e.Holder != "" {
		msg += " (holder " + e.Holder + ")"
	}
	return msg
}

// Unwrap makes errors.Is(err, backend.ErrResourceExhausted) true.
func (e *HeldError) Unwrap() error { return backend.ErrResourceExhausted }

// ClaimRunner is an optional interface of a [Runner] that starts a worker
// per reserved host (Kubernetes: one pod per host, pinned to its node).
// The runtime calls Reserved after the claim and before it grants the
// reservation, with each host's env as the reservation gives it
// (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, MEGASCALE_*, ...; for a sub-slice,
// its env as a slice of its own: the sub-slice's worker IDs, hosts and
// ID as TPU_NAME); an error fails
// the reservation (the claim is released). Released is called once the
// reservation ends, on every path, after Reserved succeeded.
type ClaimRunner interface {
	Reserved(ctx context.Context, c Claim, env map[string]map[string]string) error
	Released(c Claim)
}

// ChipHolder is implemented by a runner to say whether work outside a
// slice reservation can use a TPU host's chips. A runner whose workers
// outside reservations hold no chips (Kubernetes: a node's CPU pod
// requests no google.com/tpu) returns false. The runtime then places
// tasks, actors and placement group bundles that ask for backend.TPU
// outside a slice reservation only on hosts it has claimed for them, if
// the source is a [SliceClaimer] and the runner a [ClaimRunner]: a host
// claim is a one-host Subslice claim of the host's slice, and
// ClaimRunner.Reserved starts the host's worker holding all of its chips,
// where such work then runs with Ray's TPU_VISIBLE_CHIPS for its own
// chips; the claim ends once the host has been idle for a while. Without
// those seams the runtime refuses such work as Infeasible, saying to
// reserve a slice (or a sub-slice) and run the work in its bundles,
// instead of running it where it would see the chips' variables and no
// device. Runners without the method hold chips wherever work runs (the
// simulator).
type ChipHolder interface {
	ChipsOutsideReservations() bool
}

// HostNamer is an optional interface of a [ClaimRunner] whose workers
// reach each other by names other than the node names (Kubernetes: the
// DNS names of the claim's pods in a headless Service). The runtime asks
// it once per claim, before it derives any env (for whole slices, once
// the source has claimed them, so that the names may depend on what the
// claim found, such as pods already on the hosts), and uses its names
// wherever the env names hosts (TPU_WORKER_HOSTNAMES,
// TPU_PROCESS_ADDRESSES, MEGASCALE_COORDINATOR_ADDRESS), so the env a
// task sees in its RuntimeInfo, the reservation's env and the env
// handed to ClaimRunner.Reserved are one derivation with the same names.
type HostNamer interface {
	// HostNames returns the name of each host of c, in the shape of
	// c.Hosts. It must not block: the runtime's lock is held.
	HostNames(c Claim) [][]string
}

// Provisioner is an optional interface of a [NodeSource] that can ask the
// cluster for new TPU slices (GKE: pending capacity pods that Autopilot,
// node auto-provisioning or an autoscaled node pool answer with a new
// node pool, or a ProvisioningRequest). When a slice reservation asks for
// more slices of a shape than the cluster has intact and idle, the runtime
// calls Provision for the missing ones instead of failing as Infeasible,
// queues the reservation as for busy slices, and closes the provisioning
// once the reservation is granted or gives up (its context ended or the
// runtime closed). The new slices reach the runtime as any other: the
// source reports their nodes, and the reservation is served from its
// queue, first come first served.
type Provisioner interface {
	// Provision asks for req.NumSlices new slices of req.Shape. An error
	// wrapping errors.ErrUnsupported means the source does not provision
	// (not configured, or not for that shape): the reservation then
	// fails as Infeasible as without a Provisioner. Any other error
	// fails the reservation; InvalidArgument or Infeasible for a shape
	// the cluster can never make.
	Provision(ctx context.Context, req ProvisionRequest) (Provisioning, error)
}

// ProvisionRequest is what a reservation asks a [Provisioner] for.
type ProvisionRequest struct {
	// Name is the reservation's name (SliceRequest.Name), for errors and
	// the names of what the source creates.
	Name string
	// Shape is the shape of each slice.
	Shape tpu.SliceShape
	// NumSlices is how many new slices to ask for (≥ 1).
	NumSlices int
}

// Provisioning is one request for capacity a [Provisioner] made.
type Provisioning interface {
	// Status says what the cluster answered so far (pending, quota
	// exceeded, out of stock, ...), in words for the reservation's error
	// when it gives up. It is called at most once, before Close.
	Status(ctx context.Context) string
	// Close withdraws whatever the request still has in the cluster (on
	// GKE: its capacity pods and ProvisioningRequest), on every path,
	// once. The runtime calls it with a context bounded to 30s.
	Close(ctx context.Context) error
}

// ProvisioningFailer is an optional interface of a [Provisioning] whose
// request can fail for good while the reservation waits (on GKE: a
// ProvisioningRequest marked Failed, or Kueue's admission check that
// rejected it). The runtime fails the waiting reservation at once with
// the error received, instead of waiting for its timeout.
type ProvisioningFailer interface {
	// Failed returns a channel that receives at most one error, when the
	// request has failed for good; its code is the reservation's.
	Failed() <-chan error
}
