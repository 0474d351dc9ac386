package worker

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

// NodeExecutor is the executor of a runner whose work runs in worker
// processes, one per node or shared by several (backend/local's worker
// processes, backend/kubernetes's pods): each task attempt and actor runs
// in the worker of its node (backend.RuntimeInfo.Node) that Worker
// returns, and registrations are checked against Local, the program's own
// executor. It implements [Describer] when Local does.
type NodeExecutor struct {
	// Local is the program's executor (ray's), which the workers run too.
	Local backend.Executor
	// Worker returns the connected worker of node, starting it if need
	// be, and a function to call when the work no longer needs it: after
	// a task attempt, or when an actor's context ends. An error fails the
	// work; a runner that cannot start the node's worker reports the node
	// lost first, so that the work is retried as after a node failure.
	Worker func(ctx context.Context, node string) (c *Client, done func(), err error)
	// WorkerFor, if set, is used instead of Worker, with the work's whole
	// RuntimeInfo (nil when the backend gave none): for a runner with
	// several workers on a node, which picks one by the work's placement
	// and resources (backend/kubernetes: a slice reservation's pod for the
	// reservation's work, the node's CPU pod for other work).
	WorkerFor func(ctx context.Context, info *backend.RuntimeInfo) (c *Client, done func(), err error)
	// Connected, if set, returns the worker of node when it is connected
	// now, without waiting, and nil otherwise; done, if not nil, is as
	// Worker's (nil when the work need not say it is over). With it,
	// StartTask sends a task to a connected worker from the calling
	// goroutine; without it (or when it returns nil), StartTask returns
	// false and the backend calls RunTask.
	Connected func(node string) (c *Client, done func())
}

var (
	_ backend.Executor    = NodeExecutor{}
	_ backend.TaskStarter = NodeExecutor{}
	_ Describer           = NodeExecutor{}
)

// StartTask implements backend.TaskStarter: the task is sent to its
// node's worker when that is connected (see Connected); otherwise it
// returns false, and the backend runs the task with RunTask.
func (x NodeExecutor) StartTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo, done backend.TaskDone) bool {
	if x.Connected == nil {
		return false
	}
	c, release := x.Connected(nodeOf(info))
	if c == nil {
		return false
	}
	if release != nil {
		done = releasing{done, release}
	}
	return c.StartTask(ctx, name, arg, info, done)
}

// releasing calls release once the task is done, then done.
type releasing struct {
	done    backend.TaskDone
	release func()
}

func (r releasing) TaskDone(v backend.Value, err error) {
	r.release()
	r.done.TaskDone(v, err)
}

// TaskDoneHeld passes a held delivery on (backend.TaskDoneHolder), when
// the wrapped done can hold.
func (r releasing) TaskDoneHeld(v backend.Value, err error) backend.Flusher {
	r.release()
	if h, ok := r.done.(backend.TaskDoneHolder); ok {
		return h.TaskDoneHeld(v, err)
	}
	r.done.TaskDone(v, err)
	return nil
}

// RunTask runs the task in the worker of its node.
func (x NodeExecutor) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	c, done, err := x.workerOf(ctx, info)
	if err != nil {
		return backend.Value{}, err
	}
	defer done()
	return c.RunTask(ctx, name, arg, info)
}

// NewActor creates the actor in the worker of its node, which it keeps
// (done is called) until ctx, the actor's life, ends.
func (x NodeExecutor) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	c, done, err := x.workerOf(ctx, info)
	if err != nil {
		return nil, err
	}
	a, err := c.NewActor(ctx, class, arg, info)
	if err != nil {
		done()
		return nil, err
	}
	context.AfterFunc(ctx, done)
	return a, nil
}

// HasTask reports whether the program registered the task.
func (x NodeExecutor) HasTask(name string) bool { return x.Local.HasTask(name) }

// HasActorMethod reports whether the program registered the class (and
// method).
func (x NodeExecutor) HasActorMethod(class, method string) bool {
	return x.Local.HasActorMethod(class, method)
}

// WorkerManifest describes Local's code (the empty manifest when Local is
// no Describer).
func (x NodeExecutor) WorkerManifest() Manifest {
	m, _ := ManifestOf(x.Local)
	return m
}

// workerOf returns the worker of the work described by info (WorkerFor,
// else Worker of its node).
func (x NodeExecutor) workerOf(ctx context.Context, info *backend.RuntimeInfo) (*Client, func(), error) {
	if x.WorkerFor != nil {
		return x.WorkerFor(ctx, info)
	}
	return x.Worker(ctx, nodeOf(info))
}

func nodeOf(info *backend.RuntimeInfo) string {
	if info == nil {
		return ""
	}
	return info.Node
}
