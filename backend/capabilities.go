package backend

import "context"

// Snapshotter is implemented by backends that can report their state, for
// tools, examples and tests.
type Snapshotter interface {
	Snapshot(ctx context.Context) (*State, error)
}

// State is a point-in-time view of a cluster.
type State struct {
	Nodes           []NodeState
	PlacementGroups []PlacementGroupState
	Actors          []ActorState
	// Queued counts tasks, calls and actors waiting for resources or
	// dependencies; Running counts tasks running now.
	Queued, Running int
	// Tasks counts the tasks queued and running per name, by name. Only
	// tasks are counted (not actor calls or creations), and a task that
	// waits for its input is counted in Queued above, not here.
	Tasks []TaskSummary
	// Failures are the most recent failed task and actor call attempts,
	// oldest first, at most [RecentFailures] of them.
	Failures []TaskFailure
	// Counters are the cumulative counts since the backend started, or
	// nil if the backend keeps none.
	Counters *Counters
}

// NodeState describes one node.
type NodeState struct {
	Name   string
	Labels map[string]string
	Alive  bool
	// Capacity is the node's total; Free what no task, actor or bundle holds.
	Capacity, Free Resources
	// Running counts tasks running on the node; Tasks names them (the
	// call's display name, else the task name), sorted.
	Running int
	Tasks   []string
}

// PlacementGroupState describes one placement group.
type PlacementGroupState struct {
	ID       PlacementGroupID
	Name     string
	Strategy Strategy
	// State is "PENDING", "CREATED" or "REMOVED".
	State string
	// Nodes holds the node of each bundle once placed.
	Nodes []string
}

// ActorState describes one actor.
type ActorState struct {
	ID       ActorID
	Class    string
	Name     string
	Node     string
	State    string // "PENDING", "ALIVE", "RESTARTING" or "DEAD"
	Restarts int
}

// FaultInjector is implemented by backends that can simulate failures.
type FaultInjector interface {
	// KillNode marks a node dead: its running tasks fail with Unavailable
	// (and are retried per their options), its actors restart per their
	// max restarts, and placement groups with bundles on it are rescheduled.
	KillNode(ctx context.Context, node string) error
	// RestartNode brings a dead node back, empty.
	RestartNode(ctx context.Context, node string) error
}

// TaskCanceler is implemented by backends that can stop a submitted task
// or actor call.
type TaskCanceler interface {
	// CancelTask stops the task or actor call whose result id is, if it is
	// waiting, queued or running: a waiting or queued one is removed, a
	// running one has its context cancelled; it is not retried, and its
	// result fails with code Canceled at once. Cancelling finished work
	// does nothing. An ID that is not the result of a task or call is
	// NotFound. With opts.Force, a running task's worker process is ended
	// (its other work fails as after a crash, and the runner starts a new
	// one); Force on an actor call is InvalidArgument.
	CancelTask(ctx context.Context, id ObjectID, opts CancelOptions) error
}

// ActorCallWaiter is implemented by backends that can call an actor method
// and wait for its result in one step: CallActor, Get and Free of the
// result, with the call run on the caller's goroutine when it can start at
// once, so that a caller that waits anyway costs no hand-off to another
// goroutine and back. When ctx ends first, the call is cancelled (as
// CancelTask does) and ctx's error is returned.
// The call keeps spec, which it never modifies (as CallArgSubmitter's), and
// takes its input from arg.
type ActorCallWaiter interface {
	CallActorWait(ctx context.Context, spec *CallSpec, arg Arg) (Value, error)
}

// AllWaiter is implemented by backends that can wait for many objects
// with one wake-up of the waiting goroutine. Package ray's GetAll calls
// WaitAll before it gets the objects one by one, so that results arriving
// in bursts (a worker connection's replies) wake it once, not once per
// burst. WaitAll returns once every one of ids is done (or failed), or
// ctx ends; it must return as soon as any of ids fails, so that the
// caller reports a failure no later than Gets in turn would; and it may
// return earlier for any reason (the Gets that follow then wait as they
// would have). It reports nothing: the Gets report every outcome. It
// must not keep ids once it returns (the caller reuses the slice).
type AllWaiter interface {
	WaitAll(ctx context.Context, ids []ObjectID)
}

// CancelOptions are the options of [TaskCanceler.CancelTask].
type CancelOptions struct {
	// Force ends the worker process that runs the task, for code that
	// does not return when its context ends. Backends that run tasks in
	// the driver's process cannot end a goroutine: there Force cancels
	// the context and drops the result, as without it.
	Force bool
}

// forceKey is the context key of CancelForced.
type forceKey struct{}

// ForceCancelKey is the context key whose value (a bool) a runtime's task
// context reports as true once CancelTask with Force cancelled it;
// [CancelForced] reads it.
var ForceCancelKey any = forceKey{}

// CancelForced reports whether ctx (a task's context, or one derived from
// it) was cancelled by CancelTask with Force: an executor that runs the
// task in a worker process then ends that process instead of only
// cancelling the task in it.
func CancelForced(ctx context.Context) bool {
	v, _ := ctx.Value(ForceCancelKey).(bool)
	return v
}

// DriverAddresser is implemented by backends that know an address of the
// driver process that every worker can connect to, for servers the
// driver runs for its workers (train's rendezvous, which also makes
// JAX_COORDINATOR_ADDRESS reachable). A backend without it runs its
// workers where the driver's loopback is theirs (in the driver process,
// or beside it on one machine).
type DriverAddresser interface {
	// DriverHost returns a host (an IP address or a name) of this process
	// that every worker can reach, or an error that says why there is
	// none and what to set instead.
	DriverHost(ctx context.Context) (string, error)
}

// OutputReader is implemented by backends that run work in worker processes
// and keep the last lines their code wrote (stdout and stderr), per node,
// for dashboards.
type OutputReader interface {
	// RecentOutput returns node's last lines, oldest first, each prefixed
	// with the work that wrote it when known.
	RecentOutput(node string) []string
}
