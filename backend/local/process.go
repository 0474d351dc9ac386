package local

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/worker"
)

// ProcessOptions turns on the multi-process mode of the simulator: user
// code runs in worker processes on loopback instead of on goroutines of
// this process, so that everything a real cluster does to values and
// calls (encoding, the network, the handshake, process failures) happens
// here too, without Kubernetes. Set it in Options.Processes.
//
// The workers run this program's own executable (os.Executable): its main,
// and the TestMain of tests, must call ray.Main first. Each simulated node
// is served by one worker process; with fewer processes than nodes, nodes
// are assigned to processes round-robin in the spec's order. The scheduler
// stays in this process.
//
// A worker process that dies (or whose connection is lost) takes its nodes
// down with it, as a host failure does: the runner reports them lost to
// the runtime (cluster.LostFunc) before the work that was running there
// fails, so tasks are retried per their retry options and actors restart
// on other nodes per their max restarts. The runner then starts a new
// worker process after a backoff (RestartBackoff, doubling per
// consecutive restart) and brings its nodes back through the static node
// source, empty; meanwhile work only those nodes could hold queues for
// them. After MaxRestarts consecutive restarts
// (or with NoRestart) the nodes stay dead, and work no live node can hold
// fails with Infeasible ("no live node: N dead"). A node killed with
// KillNode comes back with RestartNode, which also starts its worker
// process again if it is not running. A dead process's pipes and state
// are released as soon as it is reaped.
// Backend.WorkerPIDs lists the processes, for fault injection with real
// signals. Close stops every worker process; workers also exit at once if
// this process dies.
//
// The zero value means one process per node with the defaults below.
type ProcessOptions struct {
	// Count is the number of worker processes; 0 means one per node.
	Count int
	// Stdout and Stderr receive the workers' output: each line the code
	// of a task or actor writes to os.Stdout or os.Stderr, prefixed with
	// where it comes from ("(task examples.square, node=cpu-1, pid=4242)
	// ..."; see worker.PrefixOutput), and the workers' own logs (to
	// Stderr). nil means this process's; io.Discard drops them.
	Stdout, Stderr io.Writer
	// LogLevel is the workers' log level: debug, info, warn, error or
	// off; "" means warn.
	LogLevel string
	// StartTimeout bounds the start of one worker process; 0 means 30s.
	StartTimeout time.Duration
	// MaxMessageSize bounds one message between this process and a
	// worker (a task's input or output, with its name and runtime info);
	// 0 means 64 MiB. A larger value fails its task with
	// ResourceExhausted.
	MaxMessageSize int
	// Heartbeat is the heartbeat interval between this process and its
	// workers; 0 means 1s. A worker that is silent for 5 intervals is
	// considered dead.
	Heartbeat time.Duration
	// RestartBackoff is the wait before restarting a dead worker process;
	// it doubles with each consecutive restart, up to MaxRestartBackoff.
	// 0 means 100ms.
	RestartBackoff time.Duration
	// MaxRestartBackoff caps the wait between restarts; 0 means 30s.
	MaxRestartBackoff time.Duration
	// MaxRestarts bounds the consecutive restarts of one worker process
	// (one that then serves for a minute resets the count); 0 means 5.
	MaxRestarts int
	// NoRestart turns restarts off: a dead worker's nodes stay dead until
	// RestartNode.
	NoRestart bool
}

const (
	defaultRestartBackoff = 100 * time.Millisecond
	maxRestartBackoff     = 30 * time.Second
	defaultMaxRestarts    = 5
	// restartResetAfter is how long a restarted process must serve for
	// its restarts to stop counting as consecutive.
	restartResetAfter = time.Minute
)

// stopTimeout bounds how long Close waits for a worker to exit after its
// lifeline closed, before it kills it.
const stopTimeout = 5 * time.Second

// procRunner is the cluster.Runner of the multi-process mode; Start returns
// a worker.NodeExecutor that runs work placed on a node in that node's
// worker process (procExecutor.worker).
type procRunner struct {
	pe *procExecutor
}

// procExecutor runs work placed on a node in that node's worker process.
// Names are checked against this process's own executor, which the
// handshake proved equal to the workers'.
type procExecutor struct {
	o       ProcessOptions
	log     *slog.Logger
	lostFn  cluster.LostFunc                             // set by Start
	restore func(ctx context.Context, node string) error // brings a node back (the static source's Restore)
	local   backend.Executor
	opts    worker.ProcessOptions
	output  worker.OutputLog // the workers' last lines per node
	workers []*procWorker
	byNode  map[string]*procWorker
	// nodeWorkers is a copy of byNode that connected reads without a
	// lock (once per task); replaced, under assign, when byNode changes.
	nodeWorkers atomic.Pointer[map[string]*procWorker]

	ctx    context.Context // cancelled by close: aborts starts
	cancel context.CancelFunc
	live   atomic.Bool // Start has finished: losses kill nodes
	assign sync.Mutex  // guards workers and byNode after newProcRunner
	closed atomic.Bool
	mu     sync.Mutex // orders starts.Add and bg.Add before close's waits
	starts sync.WaitGroup
	bg     sync.WaitGroup // restarts and reapers (spawn)
	done   chan struct{}  // closed when close has stopped every process

	restartBackoff    time.Duration
	maxRestartBackoff time.Duration
	maxRestarts       int // 0: restarts are off
}

// procWorker is one worker process slot and the nodes it serves.
type procWorker struct {
	pe    *procExecutor
	idx   int
	nodes []string

	mu       sync.Mutex
	proc     *worker.Process               // nil while dead or starting
	client   atomic.Pointer[worker.Client] // proc's client, nil with proc; set under mu
	starting chan struct{}                 // closed when the start in progress ends
	startErr error                         // of the last start
	all      []*worker.Process             // not yet reaped
	// restarts counts consecutive restarts; startedAt is when the current
	// process started.
	restarts  int
	startedAt time.Time
}

// incarnation links a process to its loss callback, which may run before
// StartProcess has returned it.
type incarnation struct {
	p    *worker.Process
	lost error
}

// newProcRunner builds the runner of the multi-process mode for nodes
// (in the spec's order), assigned to worker processes round-robin.
func newProcRunner(o ProcessOptions, log *slog.Logger, nodes []string, restore func(context.Context, string) error) (*procRunner, error) {
	if o.Count < 0 {
		return nil, backend.Errorf(backend.InvalidArgument, "create local cluster", "ProcessOptions.Count %d is negative", o.Count)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pe := &procExecutor{o: o, log: log, restore: restore, byNode: map[string]*procWorker{}}
	pe.ctx, pe.cancel = context.WithCancel(context.Background())
	pe.done = make(chan struct{})
	pe.restartBackoff = cmp.Or(o.RestartBackoff, defaultRestartBackoff)
	pe.maxRestartBackoff = cmp.Or(o.MaxRestartBackoff, maxRestartBackoff)
	if !o.NoRestart {
		pe.maxRestarts = cmp.Or(max(o.MaxRestarts, 0), defaultMaxRestarts)
	}
	count := o.Count
	if count == 0 || count > len(nodes) {
		count = len(nodes)
	}
	for i := range count {
		pe.workers = append(pe.workers, &procWorker{pe: pe, idx: i})
	}
	for i, n := range nodes {
		w := pe.workers[i%count]
		w.nodes = append(w.nodes, n)
		pe.byNode[n] = w
	}
	pe.publishNodes()
	return &procRunner{pe: pe}, nil
}

// Start implements cluster.Runner: it checks that the program can run
// workers and returns the executor that runs work in them. Worker
// processes start in NodeUp.
func (r *procRunner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	const op = "start backend"
	pe := r.pe
	m, ok := worker.ManifestOf(exec)
	switch {
	case !ok:
		return nil, backend.Errorf(backend.InvalidArgument, op, "multi-process mode needs the executor of package ray (ray.NewCluster passes it); %T cannot describe its registry", exec)
	case m.Codec == "":
		return nil, backend.Errorf(backend.InvalidArgument, op, "multi-process mode needs a codec: values cross to worker processes as bytes (do not set ray.Options.DisableCodec)")
	case worker.Launched():
		return nil, backend.Errorf(backend.FailedPrecondition, op, "this process was launched as a goray worker but runs the program's main: call ray.Main() first in main (and in TestMain)")
	}
	o := pe.o
	pe.local, pe.lostFn = exec, lost
	pe.opts = worker.ProcessOptions{
		Stdout: o.Stdout, Stderr: o.Stderr, LogLevel: o.LogLevel, StartTimeout: o.StartTimeout,
		Client: worker.ClientOptions{
			Token: worker.NewToken(), Manifest: m, MaxMessageSize: o.MaxMessageSize,
			Heartbeat: o.Heartbeat, Logger: pe.log,
		},
	}
	prefix := worker.PrefixOutput(o.Stdout, o.Stderr)
	pe.opts.Client.OnOutput = func(out worker.Output) {
		pe.output.Record(out)
		prefix(out)
	}
	pe.live.Store(true)
	return worker.NodeExecutor{Local: exec, Worker: pe.nodeWorker, Connected: pe.connected}, nil
}

// NodeUp implements cluster.Runner: it starts the worker process serving the
// node, if it is not running (nodes share their process's start).
func (r *procRunner) NodeUp(ctx context.Context, n cluster.Node) error {
	w := r.pe.worker(n.Name)
	if _, err := w.start(ctx); err != nil {
		return backend.Wrap(backend.CodeOf(err), "start worker process for node "+n.Name, err)
	}
	return nil
}

// NodeDown implements cluster.Runner. A node killed by fault injection keeps
// its process, as before the runner moved: its work failed already.
func (r *procRunner) NodeDown(name string) {}

// Close implements cluster.Runner: it stops every worker process.
func (r *procRunner) Close() error {
	r.pe.close()
	return nil
}

// worker returns the worker serving node, assigning a node the spec did
// not name to a worker round-robin.
func (pe *procExecutor) worker(node string) *procWorker {
	pe.assign.Lock()
	defer pe.assign.Unlock()
	w := pe.byNode[node]
	if w == nil {
		w = pe.workers[len(pe.byNode)%len(pe.workers)]
		w.nodes = append(w.nodes, node)
		pe.byNode[node] = w
		pe.publishNodes()
	}
	return w
}

// publishNodes replaces nodeWorkers with a copy of byNode, with assign
// held (or before the runner is shared).
func (pe *procExecutor) publishNodes() {
	m := make(map[string]*procWorker, len(pe.byNode))
	for n, w := range pe.byNode {
		m[n] = w
	}
	pe.nodeWorkers.Store(&m)
}

// WorkerPIDs returns the process ID of the live worker process serving
// each node, in the multi-process mode (see ProcessOptions); nodes whose
// process is dead or not started are absent. It returns nil in the
// in-process mode.
// RecentOutput returns the last lines the code of tasks and actors wrote on
// node in worker processes (backend.OutputReader; the dashboard shows
// them), oldest first; nil in process mode. Node "" holds the lines that
// name no work.
func (b *Backend) RecentOutput(node string) []string {
	if b.procs == nil {
		return nil
	}
	return b.procs.pe.output.Strings(node)
}

var _ backend.OutputReader = (*Backend)(nil)

func (b *Backend) WorkerPIDs() map[string]int {
	if b.procs == nil {
		return nil
	}
	pe := b.procs.pe
	out := map[string]int{}
	pe.assign.Lock()
	workers := pe.workers
	pe.assign.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		if w.proc != nil {
			for _, n := range w.nodes {
				out[n] = w.proc.PID()
			}
		}
		w.mu.Unlock()
	}
	return out
}

// start launches the worker's process and waits for it. Concurrent
// callers share one start.
func (w *procWorker) start(ctx context.Context) (*worker.Client, error) {
	w.mu.Lock()
	if w.proc != nil {
		c := w.proc.Client()
		w.mu.Unlock()
		return c, nil
	}
	if w.starting == nil {
		w.pe.mu.Lock()
		if w.pe.closed.Load() {
			w.pe.mu.Unlock()
			w.mu.Unlock()
			return nil, backend.Errorf(backend.FailedPrecondition, "start worker process", "%w", backend.ErrClosed)
		}
		w.pe.starts.Add(1)
		w.pe.mu.Unlock()
		done := make(chan struct{})
		w.starting = done
		go w.launch(done)
	}
	done := w.starting
	w.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.proc != nil {
		return w.proc.Client(), nil
	}
	return nil, w.startErr
}

func (w *procWorker) launch(done chan struct{}) {
	defer w.pe.starts.Done()
	inc := &incarnation{}
	opts := w.pe.opts
	opts.Client.OnLost = func(err error) { w.lost(inc, err) }
	p, err := worker.StartProcess(w.pe.ctx, &opts)
	w.mu.Lock()
	defer close(done)
	defer w.mu.Unlock()
	w.starting = nil
	if err != nil {
		w.startErr = err
		return
	}
	w.all = append(w.all, p)
	inc.p = p
	switch {
	case inc.lost != nil:
		w.startErr = inc.lost
		p.Kill() //nolint:errcheck // reaped by the process's waiter
	case w.pe.closed.Load():
		// close stops it: it waits for this start, then stops w.all.
		w.startErr = backend.Errorf(backend.FailedPrecondition, "start worker process", "%w", backend.ErrClosed)
	default:
		w.proc = p
		w.client.Store(p.Client())
		w.startedAt = time.Now()
		w.pe.log.Debug("local: worker process started", "worker", w.idx, "pid", p.PID(), "nodes", w.nodes)
	}
}

// lost runs when a worker's connection is lost, before its calls in
// flight fail: it kills the process and the worker's nodes, so that the
// scheduler abandons those calls and retries or restarts the work.
func (w *procWorker) lost(inc *incarnation, err error) {
	w.mu.Lock()
	if inc.p == nil {
		inc.lost = err // StartProcess has not returned yet
		w.mu.Unlock()
		return
	}
	if w.proc != inc.p {
		w.mu.Unlock()
		return
	}
	w.proc = nil
	w.client.Store(nil)
	if time.Since(w.startedAt) > restartResetAfter {
		w.restarts = 0
	}
	restart := w.pe.live.Load() && w.restarts < w.pe.maxRestarts
	if restart {
		w.restarts++
	}
	attempt := w.restarts
	w.mu.Unlock()
	inc.p.Kill() //nolint:errcheck // reaped by the process's waiter
	w.pe.spawn(func() { w.reap(inc.p) })
	w.pe.log.Warn("local: worker process lost; killing its nodes", "worker", w.idx, "pid", inc.p.PID(), "nodes", w.nodes, "cause", err, "restart", restart)
	w.killNodes(backend.Errorf(backend.Unavailable, "worker process", "worker process lost: %w", err), restart)
	if restart && !w.pe.spawn(func() { w.restart(attempt) }) {
		w.pe.abandon(w.pe.nodesOf(w))
	}
}

// reap waits for a killed process to exit, then releases its lifeline
// pipe, its connection and the worker's hold on it.
func (w *procWorker) reap(p *worker.Process) {
	p.Stop(stopTimeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = slices.DeleteFunc(w.all, func(x *worker.Process) bool { return x == p })
}

// restart starts a new process for the worker after a backoff and brings
// its nodes back; after maxRestarts consecutive failures it gives up and
// leaves the nodes dead.
func (w *procWorker) restart(attempt int) {
	pe := w.pe
	for {
		delay := min(pe.restartBackoff<<min(attempt-1, 20), pe.maxRestartBackoff)
		t := time.NewTimer(delay)
		select {
		case <-pe.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		_, err := w.start(pe.ctx)
		if pe.ctx.Err() != nil {
			return
		}
		if err == nil {
			pe.log.Debug("local: worker process restarted", "worker", w.idx, "attempt", attempt, "nodes", w.nodes)
			for _, n := range pe.nodesOf(w) {
				pe.restore(context.Background(), n) //nolint:errcheck // only fails once closed
			}
			return
		}
		w.mu.Lock()
		again := w.restarts < pe.maxRestarts
		if again {
			w.restarts++
		}
		attempt = w.restarts
		w.mu.Unlock()
		pe.log.Warn("local: worker process restart failed", "worker", w.idx, "attempt", attempt, "nodes", w.nodes, "cause", err, "again", again)
		if !again {
			pe.abandon(pe.nodesOf(w))
			return
		}
	}
}

// spawn runs f on a goroutine that close waits for, unless close has
// begun.
func (pe *procExecutor) spawn(f func()) bool {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	if pe.closed.Load() {
		return false
	}
	pe.bg.Go(f)
	return true
}

// killNodes reports the worker's nodes lost (cluster.LostFunc); restarting
// marks them as coming back (cluster.ErrRestarting).
func (w *procWorker) killNodes(cause error, restarting bool) {
	if !w.pe.live.Load() || w.pe.closed.Load() {
		return
	}
	if restarting {
		cause = cluster.Restarting(cause)
	}
	for _, n := range w.pe.nodesOf(w) {
		w.pe.lostFn(n, cause)
	}
}

// nodesOf returns a copy of the nodes w serves.
func (pe *procExecutor) nodesOf(w *procWorker) []string {
	pe.assign.Lock()
	defer pe.assign.Unlock()
	return slices.Clone(w.nodes)
}

// abandon reports nodes whose worker process will not come back lost for
// good, so that work only they could hold fails.
func (pe *procExecutor) abandon(nodes []string) {
	if pe.closed.Load() {
		return
	}
	cause := backend.Errorf(backend.Unavailable, "restart worker process", "worker process not restarted")
	for _, n := range nodes {
		pe.lostFn(n, cause)
	}
}

func (pe *procExecutor) close() {
	pe.mu.Lock()
	already := pe.closed.Swap(true)
	pe.mu.Unlock()
	if already {
		<-pe.done
		return
	}
	defer close(pe.done)
	pe.cancel()
	pe.starts.Wait()
	pe.bg.Wait()
	var wg sync.WaitGroup
	for _, w := range pe.workers {
		w.mu.Lock()
		all := w.all
		w.proc = nil
		w.client.Store(nil)
		w.mu.Unlock()
		for _, p := range all {
			wg.Go(func() { p.Stop(stopTimeout) })
		}
	}
	wg.Wait()
}

// client returns the connection to the worker serving node, starting its
// process if it is dead. When it cannot, it kills the worker's nodes
// before returning the error, so that the scheduler treats the work as
// lost to a node failure.
func (pe *procExecutor) client(ctx context.Context, node string) (*worker.Client, error) {
	pe.assign.Lock()
	w := pe.byNode[node]
	pe.assign.Unlock()
	if w == nil {
		return nil, backend.Errorf(backend.Internal, "run on node "+node, "no worker process serves node %q", node)
	}
	c, err := w.start(ctx)
	if err != nil && ctx.Err() == nil {
		w.killNodes(err, false)
		err = backend.Errorf(backend.Unavailable, "node "+node, "worker process for node %s cannot start: %w", node, err)
	}
	return c, err
}

// connected is the NodeExecutor's Connected: the client of node's process
// if that is running, else nil. It takes no lock: it runs once per task.
func (pe *procExecutor) connected(node string) (*worker.Client, func()) {
	w := (*pe.nodeWorkers.Load())[node]
	if w == nil {
		return nil, nil
	}
	return w.client.Load(), nil
}

// nodeWorker is the NodeExecutor's Worker: the node's process's client; a
// process serves its nodes' work until it dies, so done does nothing.
func (pe *procExecutor) nodeWorker(ctx context.Context, node string) (*worker.Client, func(), error) {
	c, err := pe.client(ctx, node)
	return c, func() {}, err
}
