//go:build unix

package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/worker"
)

// The test binary is also the worker executable: TestMain serves when it
// was launched as a worker. Two variables make other programs of it: a
// worker built from "different code" (an extra task), and a driver that
// starts a worker and waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("WORKERTEST_EXTRA_TASK") == "1" {
		ray.NewTask("workertest.extra", func(ctx context.Context, x int) (int, error) { return x, nil })
	}
	ray.Main()
	if os.Getenv("WORKERTEST_DRIVER") == "1" {
		os.Exit(runDriver())
	}
	goleak.VerifyTestMain(m)
}

// runDriver starts a worker, prints its pid and blocks until stdin closes
// or the process is killed.
func runDriver() int {
	p, err := worker.StartProcess(context.Background(), &worker.ProcessOptions{Client: worker.ClientOptions{Manifest: manifest()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("worker-pid %d\n", p.PID())
	io.Copy(io.Discard, os.Stdin)
	p.Stop(5 * time.Second)
	return 0
}

type where struct {
	Task, Node string
	Labels     map[string]string
	Env        string
	Bundle     int
	Group      uint64
	Attempt    int
	CPU        float64
	Actor      uint64
}

type counter struct{ n int }

var (
	echo    = ray.NewTask("workertest.echo", func(ctx context.Context, s string) (string, error) { return s, nil })
	getenvT = ray.NewTask("workertest.getenv", func(ctx context.Context, key string) (string, error) { return os.Getenv(key), nil })
	failT   = ray.NewTask("workertest.fail", func(ctx context.Context, s string) (int, error) { return 0, errors.New(s) })
	panicT  = ray.NewTask("workertest.panic", func(ctx context.Context, s string) (int, error) { panic(s) })
	whereT  = ray.NewTask("workertest.where", func(ctx context.Context, key string) (where, error) {
		rc, _ := ray.Runtime(ctx)
		return where{Task: rc.TaskName(), Node: rc.NodeName(), Labels: rc.NodeLabels(), Env: rc.Env(key),
			Bundle: rc.BundleIndex(), Group: uint64(rc.PlacementGroupID()), Attempt: rc.Attempt(),
			CPU: rc.Resources()[ray.CPU], Actor: uint64(rc.ActorID())}, nil
	})
	// sleepT blocks until its context ends; it announces its start on
	// stderr, which the process tests watch.
	sleepT = ray.NewTask("workertest.sleep", func(ctx context.Context, tag string) (string, error) {
		fmt.Fprintf(os.Stderr, "workertest: started %s\n", tag)
		<-ctx.Done()
		return "", ctx.Err()
	})
	counterC   = ray.NewActorClass("workertest.counter", func(ctx context.Context, n int) (*counter, error) { return &counter{n: n}, nil })
	counterAdd = ray.NewMethod(counterC, "add", func(ctx context.Context, c *counter, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
)

type registry struct{}

func (registry) Entries() []worker.Entry { return manifest().Entries }

func (registry) Executor(codec string) (backend.Executor, error) {
	return ray.NewExecutor(ray.JSON), nil
}

func manifest() worker.Manifest {
	m, _ := worker.ManifestOf(ray.NewExecutor(ray.JSON))
	return m
}

const token = "test-token"

// inProcess serves the registry on loopback in this process.
func inProcess(t *testing.T) *worker.Client {
	t.Helper()
	srv, err := worker.NewServer(registry{}, &worker.ServerOptions{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c, err := worker.Dial(ctx, ln.Addr().String(), &worker.ClientOptions{Token: token, Manifest: manifest()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func encode(t *testing.T, v any) backend.Value {
	t.Helper()
	b, err := ray.JSON.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Value{Data: b}
}

func decode[T any](t *testing.T, v backend.Value) T {
	t.Helper()
	var out T
	if err := ray.JSON.Unmarshal(v.Data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTasksCrossTheWire(t *testing.T) {
	c := inProcess(t)
	ctx := context.Background()
	t.Run("Echo", func(t *testing.T) {
		is := is.New(t)
		v, err := c.RunTask(ctx, echo.Name(), encode(t, "hello"), nil)
		is.NoErr(err)
		is.Equal(decode[string](t, v), "hello")
	})
	t.Run("RuntimeInfo", func(t *testing.T) {
		is := is.New(t)
		info := &backend.RuntimeInfo{Task: whereT.Name(), Attempt: 2, Node: "node-7", NodeLabels: map[string]string{"zone": "b"},
			Resources: backend.Resources{backend.CPU: 1.5}, Placement: backend.Placement{Group: 4, Bundle: 1},
			Env: map[string]string{"TPU_WORKER_ID": "1"}}
		v, err := c.RunTask(ctx, whereT.Name(), encode(t, "TPU_WORKER_ID"), info)
		is.NoErr(err)
		w := decode[where](t, v)
		is.Equal(w, where{Task: whereT.Name(), Node: "node-7", Labels: map[string]string{"zone": "b"}, Env: "1", Bundle: 1, Group: 4, Attempt: 2, CPU: 1.5})
	})
	t.Run("UserError", func(t *testing.T) {
		is := is.New(t)
		_, err := c.RunTask(ctx, failT.Name(), encode(t, "bad input"), &backend.RuntimeInfo{Task: failT.Name(), Attempt: 1})
		is.Equal(backend.CodeOf(err), backend.TaskFailed)
		var te *backend.TaskError
		is.True(errors.As(err, &te))
		is.Equal(*te, backend.TaskError{Task: failT.Name(), Attempt: 1, Message: "bad input"})
	})
	t.Run("Panic", func(t *testing.T) {
		is := is.New(t)
		_, err := c.RunTask(ctx, panicT.Name(), encode(t, "kaboom"), &backend.RuntimeInfo{Task: panicT.Name()})
		var te *backend.TaskError
		is.True(errors.As(err, &te))
		is.True(te.Panicked)
		is.Equal(te.Message, "kaboom")
		is.True(strings.Contains(te.Stack, "worker_test")) // the worker's stack names the panicking code
	})
	t.Run("Unregistered", func(t *testing.T) {
		is := is.New(t)
		is.True(!c.HasTask("workertest.nope"))
		// Even asked directly, the worker runs only registered names.
		_, err := c.RunTask(ctx, "workertest.nope", encode(t, 1), nil)
		is.Equal(backend.CodeOf(err), backend.NotFound)
		is.True(strings.Contains(err.Error(), `task "workertest.nope" is not registered in this worker`))
	})
	t.Run("NativeValue", func(t *testing.T) {
		is := is.New(t)
		_, err := c.RunTask(ctx, echo.Name(), backend.Value{Native: "x"}, nil)
		is.Equal(backend.CodeOf(err), backend.InvalidArgument)
		is.True(strings.Contains(err.Error(), "DisableCodec"))
	})
}

func TestActorLivesInWorker(t *testing.T) {
	is := is.New(t)
	c := inProcess(t)
	is.True(c.HasActorMethod(counterC.Name(), ""))
	is.True(c.HasActorMethod(counterC.Name(), "add"))
	is.True(!c.HasActorMethod(counterC.Name(), "sub"))
	life, kill := context.WithCancel(context.Background())
	defer kill()
	a, err := c.NewActor(life, counterC.Name(), encode(t, 10), nil)
	is.NoErr(err)
	ctx := context.Background()
	for i, want := range []int{11, 13, 16} {
		v, err := a.Call(ctx, "add", encode(t, i+1), nil)
		is.NoErr(err)
		is.Equal(decode[int](t, v), want) // state kept between calls
	}
	kill() // the actor's lifetime context ends: the worker drops it
	for {
		_, err = a.Call(ctx, "add", encode(t, 1), nil)
		if err != nil {
			break
		}
	}
	is.Equal(backend.CodeOf(err), backend.ActorDied)
}

func TestCancelStopsWorkerCode(t *testing.T) {
	is := is.New(t)
	c := inProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.RunTask(ctx, sleepT.Name(), encode(t, "cancel"), nil)
	is.Equal(err, context.DeadlineExceeded) // returned as is
	v, err := c.RunTask(context.Background(), echo.Name(), encode(t, "after"), nil)
	is.NoErr(err)
	is.Equal(decode[string](t, v), "after")
}

// watch is a stderr writer that signals when a line containing want
// appears.
type watch struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func newWatch(want string) *watch { return &watch{want: want, seen: make(chan struct{})} }

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func startProcess(t *testing.T, opts *worker.ProcessOptions) *worker.Process {
	t.Helper()
	if opts == nil {
		opts = &worker.ProcessOptions{}
	}
	opts.Client.Manifest = manifest()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := worker.StartProcess(ctx, opts)
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

func TestProcess(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		is := is.New(t)
		p := startProcess(t, nil)
		is.True(p.PID() != os.Getpid())
		is.Equal(p.Client().PID(), p.PID())
		v, err := p.Client().RunTask(context.Background(), echo.Name(), encode(t, "across"), nil)
		is.NoErr(err)
		is.Equal(decode[string](t, v), "across")
		p.Stop(5 * time.Second)
		is.NoErr(p.ExitError()) // the worker exited cleanly when its lifeline closed
	})
	t.Run("TokenNotInEnviron", func(t *testing.T) {
		is := is.New(t)
		const token = "0123456789abcdef-token-under-test"
		p := startProcess(t, &worker.ProcessOptions{Client: worker.ClientOptions{Token: token}})
		environ, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/environ")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		is.True(!strings.Contains(string(environ), token))                // the token never was in the environment
		is.True(strings.Contains(string(environ), worker.EnvTokenFD+"=")) // only the descriptor it came through
		v, err := p.Client().RunTask(context.Background(), echo.Name(), encode(t, "authenticated"), nil)
		is.NoErr(err)
		is.Equal(decode[string](t, v), "authenticated")
	})
	// A driver's ClientOptions.Env reaches the launched worker's process
	// env before anything runs (a capacity pod turned worker pod gets its
	// reservation's env so); the worker's own variables are refused.
	t.Run("EnvFromDriver", func(t *testing.T) {
		is := is.New(t)
		p := startProcess(t, &worker.ProcessOptions{Client: worker.ClientOptions{Env: map[string]string{"TPU_WORKER_ID": "3"}}})
		v, err := p.Client().RunTask(context.Background(), getenvT.Name(), encode(t, "TPU_WORKER_ID"), nil)
		is.NoErr(err)
		is.Equal(decode[string](t, v), "3")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err = worker.StartProcess(ctx, &worker.ProcessOptions{Client: worker.ClientOptions{Manifest: manifest(), Env: map[string]string{worker.EnvIdleTimeout: "1s"}}})
		is.Equal(backend.CodeOf(err), backend.InvalidArgument)
		is.True(strings.Contains(err.Error(), `variable "GORAY_WORKER_IDLE_TIMEOUT" is the worker's own`))
	})
	t.Run("SIGKILLMidTask", func(t *testing.T) {
		is := is.New(t)
		started := newWatch("workertest: started kill-me")
		lost := make(chan error, 1)
		var callFailed bool
		var mu sync.Mutex
		p := startProcess(t, &worker.ProcessOptions{Stderr: started, Client: worker.ClientOptions{OnLost: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if callFailed {
				t.Error("OnLost ran after the call failed")
			}
			lost <- err
		}}})
		res := make(chan error, 1)
		go func() {
			_, err := p.Client().RunTask(context.Background(), sleepT.Name(), encode(t, "kill-me"), nil)
			mu.Lock()
			callFailed = true
			mu.Unlock()
			res <- err
		}()
		wait(t, started.seen, "the task to start in the worker")
		is.NoErr(p.Kill())
		err := <-res
		is.Equal(backend.CodeOf(err), backend.Unavailable)
		is.True(errors.Is(err, backend.ErrUnavailable))
		is.True(strings.Contains(err.Error(), "run task workertest.sleep"))
		is.True(strings.Contains(err.Error(), strconv.Itoa(p.PID())))
		is.True(<-lost != nil)
		<-p.Exited()
		is.True(strings.Contains(p.ExitError().Error(), "killed"))
	})
	t.Run("VersionSkew", func(t *testing.T) {
		is := is.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := worker.StartProcess(ctx, &worker.ProcessOptions{Env: []string{"WORKERTEST_EXTRA_TASK=1"}, Client: worker.ClientOptions{Manifest: manifest()}})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
		is.True(errors.Is(err, ray.ErrFailedPrecondition))
		is.True(strings.Contains(err.Error(), `built from different code: task "workertest.extra" is registered only in the worker (func(int) int)`))
	})
	t.Run("NotAWorkerBinary", func(t *testing.T) {
		is := is.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := worker.StartProcess(ctx, &worker.ProcessOptions{Path: "/bin/true", Client: worker.ClientOptions{Manifest: manifest()}})
		is.Equal(backend.CodeOf(err), backend.Unavailable)
		is.True(strings.Contains(err.Error(), "exited before serving"))
		is.True(strings.Contains(err.Error(), "ray.Main()"))
	})
}

// TestDriverDeath starts a driver process that starts a worker, kills the
// driver with SIGKILL and checks that the worker exits within a bound.
func TestDriverDeath(t *testing.T) {
	is := is.New(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WORKERTEST_DRIVER=1")
	stdin, err := cmd.StdinPipe()
	is.NoErr(err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	is.NoErr(err)
	cmd.Stderr = os.Stderr
	is.NoErr(cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	is.NoErr(err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "worker-pid ")))
	is.NoErr(err)
	is.True(alive(pid))
	is.NoErr(cmd.Process.Kill())
	cmd.Wait()
	// The worker is not our child: poll for its exit, with a bound.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("worker %d still runs 10s after its driver died", pid)
		}
		<-tick.C
	}
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// ExampleStartProcess starts this program as a worker process and runs a
// task in it. The program's main (here the test binary's TestMain) calls
// ray.Main first, so that the worker serves instead of running main.
func ExampleStartProcess() {
	ctx := context.Background()
	m, _ := worker.ManifestOf(ray.NewExecutor(ray.JSON)) // what this program registered
	p, err := worker.StartProcess(ctx, &worker.ProcessOptions{Client: worker.ClientOptions{Manifest: m}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Stop(5 * time.Second)
	in, _ := ray.JSON.Marshal("hello")
	out, err := p.Client().RunTask(ctx, "workertest.echo", backend.Value{Data: in}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s, from another process: %v\n", out.Data, p.PID() != os.Getpid())
	// Output: "hello", from another process: true
}
