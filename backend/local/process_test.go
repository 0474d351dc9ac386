//go:build unix

package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// The test binary is the worker executable of the multi-process tests:
// launched as a worker, it serves the registered tasks instead of running
// tests. ray.Main belongs first in TestMain; an init function works as
// well, since it runs after every registration at package level.
func init() {
	ray.Main()
	if os.Getenv(echoServerEnv) != "" {
		os.Exit(serveEcho()) // the loopback floor of the benchmarks
	}
}

func newProcessLocal(t *testing.T, nodes []backendtest.Node, opts *local.ProcessOptions) *local.Backend {
	t.Helper()
	spec := local.ClusterSpec{}
	for _, n := range nodes {
		spec.Nodes = append(spec.Nodes, local.NodeSpec{Name: n.Name, Resources: n.Resources, Labels: n.Labels})
	}
	if opts == nil {
		opts = &local.ProcessOptions{}
	}
	b, err := local.New(spec, &local.Options{Processes: opts})
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	return b
}

// TestConformanceProcesses runs the suite with every node's work in its
// own worker process.
func TestConformanceProcesses(t *testing.T) {
	backendtest.RunConformanceTests(t, backendtest.Harness{
		New: func(t *testing.T, nodes []backendtest.Node) backend.Backend {
			return newProcessLocal(t, nodes, nil)
		},
		Capabilities: backendtest.AllCapabilities,
	})
}

type place struct {
	Node    string
	PID     int
	Attempt int
	N       int
}

var (
	// hold blocks its first attempt until its context ends, announcing
	// itself on stderr; later attempts return where they ran.
	hold = ray.NewTask("proctest.hold", func(ctx context.Context, tag string) (place, error) {
		rc, _ := ray.Runtime(ctx)
		if rc.Attempt() == 0 {
			fmt.Fprintf(os.Stderr, "proctest: started %s\n", tag)
			<-ctx.Done()
			return place{}, ctx.Err()
		}
		return place{Node: rc.NodeName(), PID: os.Getpid(), Attempt: rc.Attempt()}, nil
	})
	// ignoreCancel runs until its process ends, ignoring its context.
	ignoreCancel = ray.NewTask("proctest.ignore_cancel", func(ctx context.Context, tag string) (place, error) {
		fmt.Fprintf(os.Stderr, "proctest: started %s\n", tag)
		select {} // never returns
	})
	// say writes its input to stdout, and with the log package to stderr.
	say = ray.NewTask("proctest.say", func(ctx context.Context, s string) (struct{}, error) {
		fmt.Println(s)
		log.Printf("logged %s", s)
		return struct{}{}, nil
	})
	whereProc = ray.NewTask("proctest.where", func(ctx context.Context, _ struct{}) (place, error) {
		rc, _ := ray.Runtime(ctx)
		return place{Node: rc.NodeName(), PID: os.Getpid()}, nil
	})
	echoProc = ray.NewTask("proctest.echo", func(ctx context.Context, s string) (string, error) { return s, nil })

	tally    = ray.NewActorClass("proctest.tally", func(ctx context.Context, n int) (*tallyActor, error) { return &tallyActor{n: n}, nil })
	tallyAdd = ray.NewMethod(tally, "add", func(ctx context.Context, a *tallyActor, d int) (place, error) {
		a.n += d
		rc, _ := ray.Runtime(ctx)
		return place{Node: rc.NodeName(), PID: os.Getpid(), N: a.n}, nil
	})
)

type tallyActor struct{ n int }

// stderrWatch collects the workers' stderr and signals when a line
// containing want appears.
type stderrWatch struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func newStderrWatch(want string) *stderrWatch {
	return &stderrWatch{want: want, seen: make(chan struct{})}
}

func (w *stderrWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *stderrWatch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *stderrWatch) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %q in the workers' output; it had:\n%s", w.want, w.text())
	}
}

func processCluster(t *testing.T, opts *local.ProcessOptions) (*ray.Cluster, *local.Backend) {
	t.Helper()
	b := newProcessLocal(t, backendtest.DefaultNodes(), opts)
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatalf("ray.NewCluster: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, b
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runningNode finds the node running a task.
func runningNode(t *testing.T, c *ray.Cluster) string {
	t.Helper()
	st, err := c.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Running > 0 {
			return n.Name
		}
	}
	t.Fatal("no node runs a task")
	return ""
}

func sigkill(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

func TestWorkerProcessKilled(t *testing.T) {
	t.Run("TaskRetried", func(t *testing.T) {
		is := is.New(t)
		watch := newStderrWatch("proctest: started retried")
		c, b := processCluster(t, &local.ProcessOptions{Stderr: watch, NoRestart: true})
		ctx := testCtx(t)
		ref := hold.Remote(ctx, c, "retried", ray.Retries(1))
		watch.wait(t)
		node := runningNode(t, c)
		pid := b.WorkerPIDs()[node]
		is.True(pid != 0)
		sigkill(t, pid)
		p, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(p.Attempt, 1)  // the lost attempt was retried,
		is.True(p.Node != node) // on a live node,
		is.True(p.PID != pid)   // in another worker process
		_, alive := b.WorkerPIDs()[node]
		is.True(!alive) // the killed worker's node is dead
	})
	t.Run("UnavailableWithoutRetries", func(t *testing.T) {
		is := is.New(t)
		watch := newStderrWatch("proctest: started lost")
		c, b := processCluster(t, &local.ProcessOptions{Stderr: watch, NoRestart: true})
		ctx := testCtx(t)
		ref := hold.Remote(ctx, c, "lost", ray.Retries(0), ray.NodeSelector{"zone": "c"})
		watch.wait(t)
		sigkill(t, b.WorkerPIDs()["node-2"])
		_, err := ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.True(errors.Is(err, ray.ErrUnavailable))
		is.True(strings.Contains(err.Error(), "node-2"))
		// The node died with its worker and, without restarts, stays
		// dead: work only it could run is infeasible until it is
		// restarted...
		_, err = echoProc.Remote(ctx, c, "x", ray.NodeSelector{"zone": "c"}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "1 more node is dead"))
		// ...and a restarted node gets a fresh worker process.
		fi := c.Backend().(backend.FaultInjector)
		is.NoErr(fi.RestartNode(ctx, "node-2"))
		p, err := whereProc.Remote(ctx, c, struct{}{}, ray.NodeSelector{"zone": "c"}).Get(ctx)
		is.NoErr(err)
		is.Equal(p.Node, "node-2")
		is.Equal(b.WorkerPIDs()["node-2"], p.PID)
	})
	t.Run("ActorRestartsOnAnotherWorker", func(t *testing.T) {
		is := is.New(t)
		c, b := processCluster(t, &local.ProcessOptions{NoRestart: true})
		ctx := testCtx(t)
		// A call in flight when the worker dies is retried on the
		// restarted actor (MaxTaskRetries); the kill is asynchronous, so
		// the next call may be in flight then.
		h := tally.Remote(ctx, c, 10, ray.MaxRestarts(1), ray.MaxTaskRetries(1))
		p, err := tallyAdd.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(p.N, 11)
		is.Equal(b.WorkerPIDs()[p.Node], p.PID)
		sigkill(t, p.PID)
		p2, err := tallyAdd.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(p2.N, 11) // restarted from its constructor,
		is.True(p2.Node != p.Node)
		is.True(p2.PID != p.PID) // in another worker process

		sigkill(t, p2.PID) // out of restarts
		_, err = tallyAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
	})
}

// TestWorkerProcessRestarted: a SIGKILLed worker process is replaced after
// a backoff and its node comes back; work only that node can run queues for
// it meanwhile instead of failing as Infeasible.
func TestWorkerProcessRestarted(t *testing.T) {
	is := is.New(t)
	c, b := processCluster(t, &local.ProcessOptions{RestartBackoff: time.Millisecond})
	ctx := testCtx(t)
	first, err := whereProc.Remote(ctx, c, struct{}{}, ray.NodeSelector{"zone": "c"}).Get(ctx)
	is.NoErr(err)
	for range 3 {
		sigkill(t, b.WorkerPIDs()["node-2"])
		// Retries: the task may reach the dying process before its loss
		// is noticed.
		p, err := whereProc.Remote(ctx, c, struct{}{}, ray.NodeSelector{"zone": "c"}, ray.Retries(-1)).Get(ctx)
		is.NoErr(err)
		is.Equal(p.Node, "node-2")
		is.True(p.PID != first.PID) // a new process serves the node
		first = p
	}
}

// TestWorkerProcessRestartsBounded: after MaxRestarts consecutive
// restarts the node stays dead, and work only it could run fails with
// Infeasible saying no live node can hold it.
func TestWorkerProcessRestartsBounded(t *testing.T) {
	is := is.New(t)
	b := newProcessLocal(t, []backendtest.Node{{Name: "solo", Resources: backend.Resources{backend.CPU: 1}}},
		&local.ProcessOptions{RestartBackoff: time.Millisecond, MaxRestarts: 1})
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	ctx := testCtx(t)
	p, err := whereProc.Remote(ctx, c, struct{}{}).Get(ctx)
	is.NoErr(err)
	sigkill(t, p.PID) // restart 1 of 1
	p2, err := whereProc.Remote(ctx, c, struct{}{}, ray.Retries(-1)).Get(ctx)
	is.NoErr(err)
	is.True(p2.PID != p.PID)
	sigkill(t, p2.PID) // out of restarts
	_, err = whereProc.Remote(ctx, c, struct{}{}, ray.Retries(-1)).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	is.True(strings.Contains(err.Error(), "no live node: 1 dead"))
}

// TestWorkerProcessDeathsReleaseResources: many worker deaths leave no
// descriptors and no child processes behind.
func TestWorkerProcessDeathsReleaseResources(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("needs /proc")
	}
	is := is.New(t)
	b := newProcessLocal(t, []backendtest.Node{{Name: "solo", Resources: backend.Resources{backend.CPU: 1}}},
		&local.ProcessOptions{RestartBackoff: time.Millisecond, MaxRestartBackoff: time.Millisecond, MaxRestarts: 1000})
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	ctx := testCtx(t)
	p, err := whereProc.Remote(ctx, c, struct{}{}).Get(ctx)
	is.NoErr(err)
	fds, children := openFDs(t), childProcesses(t)
	const kills = 40
	for range kills {
		sigkill(t, p.PID)
		next, err := whereProc.Remote(ctx, c, struct{}{}, ray.Retries(-1)).Get(ctx)
		is.NoErr(err)
		is.True(next.PID != p.PID)
		p = next
	}
	// The last processes may still be being reaped: a little slack, far
	// below one descriptor per death.
	is.True(openFDs(t) <= fds+4)             // no descriptor leaked per death
	is.True(childProcesses(t) <= children+2) // dead workers are reaped
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// childProcesses counts the processes whose parent is this one, zombies
// included.
func childProcesses(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	n := 0
	for _, e := range ents {
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		// pid (comm) state ppid ...: comm may hold spaces; ppid follows
		// the last ')'.
		i := strings.LastIndexByte(string(data), ')')
		var state string
		var ppid int
		if i < 0 {
			continue
		}
		if _, err := fmt.Sscan(string(data[i+1:]), &state, &ppid); err == nil && ppid == me {
			n++
		}
	}
	return n
}

func TestWorkerProcessesStopOnClose(t *testing.T) {
	is := is.New(t)
	b := newProcessLocal(t, backendtest.DefaultNodes(), &local.ProcessOptions{Count: 2})
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	ctx := testCtx(t)
	v, err := echoProc.Remote(ctx, c, "hi").Get(ctx)
	is.NoErr(err)
	is.Equal(v, "hi")
	pids := b.WorkerPIDs()
	is.Equal(len(pids), 3) // three nodes,
	distinct := map[int]bool{}
	for _, pid := range pids {
		distinct[pid] = true
		is.True(pid != os.Getpid())
	}
	is.Equal(len(distinct), 2) // on two processes
	is.NoErr(c.Close())
	for pid := range distinct {
		// Close reaped them: the pids are gone.
		is.True(errors.Is(syscall.Kill(pid, 0), syscall.ESRCH))
	}
	is.Equal(len(b.WorkerPIDs()), 0)
}

func TestWorkerProcessErrors(t *testing.T) {
	t.Run("DisableCodec", func(t *testing.T) {
		is := is.New(t)
		b := newProcessLocal(t, backendtest.DefaultNodes(), nil)
		_, err := ray.NewCluster(context.Background(), b, &ray.Options{DisableCodec: true})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "DisableCodec"))
		is.NoErr(b.Close())
	})
	t.Run("MessageTooLarge", func(t *testing.T) {
		is := is.New(t)
		c, _ := processCluster(t, &local.ProcessOptions{Count: 1, MaxMessageSize: 64 << 10})
		ctx := testCtx(t)
		_, err := echoProc.Remote(ctx, c, strings.Repeat("x", 100<<10)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
		is.True(strings.Contains(err.Error(), "exceeds the limit of 64.0 KiB"))
		v, err := echoProc.Remote(ctx, c, "small").Get(ctx) // the worker still serves
		is.NoErr(err)
		is.Equal(v, "small")
	})
}

// ExampleProcessOptions runs tasks in worker processes on loopback. The
// workers run this program's executable, so main (here: the test binary's
// init) calls ray.Main first:
//
//	func main() {
//		ray.Main()
//		...
//	}
func ExampleProcessOptions() {
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{
		{Name: "cpu", Count: 2, Resources: backend.Resources{backend.CPU: 4}},
	}}, &local.Options{Processes: &local.ProcessOptions{}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	p, err := whereProc.Remote(ctx, c, struct{}{}).Get(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("ran in another process:", p.PID != os.Getpid())
	fmt.Println("worker processes:", len(b.WorkerPIDs()))
	// Output:
	// ran in another process: true
	// worker processes: 2
}

// Cancel with Force ends the worker process that runs a task which ignores
// its context: Get fails with Canceled at once, the process exits, the
// node's other task in that process fails as after a crash and is retried,
// and the runner starts a new worker for the node, which runs the next
// work. Without Force the process stays (the task goes on in it).
func TestForceCancelEndsTheWorkerProcess(t *testing.T) {
	is := is.New(t)
	watch, watchN := newStderrWatch("proctest: started stubborn"), newStderrWatch("proctest: started neighbour")
	c, b := processCluster(t, &local.ProcessOptions{Stderr: io.MultiWriter(watch, watchN), RestartBackoff: 10 * time.Millisecond})
	ctx := testCtx(t)
	zoneC := ray.NodeSelector{"zone": "c"} // node-2 only
	ref := ignoreCancel.Remote(ctx, c, "stubborn", zoneC)
	watch.wait(t)
	pid := b.WorkerPIDs()["node-2"]
	is.True(pid != 0)
	neighbour := hold.Remote(ctx, c, "neighbour", zoneC, ray.Retries(1)) // another task in that process
	watchN.wait(t)

	is.NoErr(ref.Cancel(ctx, ray.Force()))
	_, err := ref.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Canceled)
	p, err := neighbour.Get(ctx)
	is.NoErr(err)
	is.Equal(p.Attempt, 1) // lost with the process, retried
	is.True(p.PID != pid)  // in the new worker process of node-2
	is.Equal(p.Node, "node-2")
	for syscall.Kill(pid, 0) == nil { // the old process is gone (reaped by the runner)
		select {
		case <-ctx.Done():
			t.Fatalf("worker process %d still runs after a forced cancel", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Without Force the task is cancelled but its process stays.
	ref = ignoreCancel.Remote(ctx, c, "stubborn", zoneC)
	pid = b.WorkerPIDs()["node-2"]
	is.NoErr(ref.Cancel(ctx))
	_, err = ref.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Canceled)
	q, err := whereProc.Remote(ctx, c, struct{}{}, zoneC).Get(ctx)
	is.NoErr(err)
	is.Equal(q.PID, pid)
}

// panicOf returns what f panics with, or "".
func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// Registering after worker processes started panics at once, naming what
// was registered and saying to register at package level, instead of the
// work failing later with NotFound in every worker.
func TestLateRegistrationPanics(t *testing.T) {
	is := is.New(t)
	c, _ := processCluster(t, nil)
	ctx := testCtx(t)
	_, err := whereProc.Remote(ctx, c, struct{}{}).Get(ctx) // the workers run
	is.NoErr(err)
	msg := panicOf(func() {
		ray.NewTask("proctest.late", func(ctx context.Context, x int) (int, error) { return x, nil })
	})
	t.Log(msg)
	is.True(strings.Contains(msg, `ray: NewTask "proctest.late": registered after worker processes started`))
	is.True(strings.Contains(msg, "register tasks, actor classes and methods at package level"))
	msg = panicOf(func() {
		ray.NewActorClass("proctest.lateClass", func(ctx context.Context, x int) (*int, error) { return &x, nil })
	})
	is.True(strings.Contains(msg, `ray: NewActorClass "proctest.lateClass": registered after worker processes started`))
	msg = panicOf(func() {
		ray.NewMethod(tally, "late", func(ctx context.Context, a *tallyActor, x int) (int, error) { return x, nil })
	})
	is.True(strings.Contains(msg, `ray: NewMethod "late" of actor class "proctest.tally": registered after`))
}

// What a task writes to stdout and stderr in a worker process reaches the
// driver line by line, each prefixed with the task, its node and the
// worker's PID, on the matching stream.
func TestWorkerOutputReachesTheDriver(t *testing.T) {
	is := is.New(t)
	out, errs := newStderrWatch("(task proctest.say, node=node-2, pid="), newStderrWatch("logged hello from node-2")
	c, b := processCluster(t, &local.ProcessOptions{Stdout: out, Stderr: errs})
	ctx := testCtx(t)
	_, err := say.Remote(ctx, c, "hello from node-2", ray.NodeSelector{"zone": "c"}).Get(ctx)
	is.NoErr(err)
	out.wait(t)
	errs.wait(t)
	pid := b.WorkerPIDs()["node-2"]
	want := fmt.Sprintf("(task proctest.say, node=node-2, pid=%d) hello from node-2\n", pid)
	is.True(strings.Contains(out.text(), want))
	is.True(!strings.Contains(out.text(), "logged")) // stderr's lines stay on stderr
	is.True(strings.Contains(errs.text(), fmt.Sprintf("(task proctest.say, node=node-2, pid=%d) ", pid)))
	is.True(slices.Contains(b.RecentOutput("node-2"), strings.TrimSuffix(want, "\n"))) // for the dashboard
	t.Log(out.text(), errs.text())
}
