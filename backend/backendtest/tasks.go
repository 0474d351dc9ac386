package backendtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goray-dev/goray/ray"
)

// The suite's registered tasks and actors.

var (
	echo = ray.NewTask("backendtest.echo", func(ctx context.Context, s string) (string, error) { return s, nil })
	add1 = ray.NewTask("backendtest.add1", func(ctx context.Context, x int) (int, error) { return x + 1, nil })

	fail = ray.NewTask("backendtest.fail", func(ctx context.Context, msg string) (int, error) {
		return 0, errors.New(msg)
	})
	boom = ray.NewTask("backendtest.panic", func(ctx context.Context, msg string) (int, error) {
		panic(msg)
	})
	// failUntil fails attempts below its input and then succeeds with the
	// attempt number.
	failUntil = ray.NewTask("backendtest.failUntil", func(ctx context.Context, n int) (int, error) {
		rc, _ := ray.Runtime(ctx)
		if rc.Attempt() < n {
			return 0, fmt.Errorf("attempt %d < %d", rc.Attempt(), n)
		}
		return rc.Attempt(), nil
	})

	structTask = ray.NewTask("backendtest.struct", func(ctx context.Context, p point) (point, error) {
		return point{X: p.Y, Y: p.X, Tags: append(p.Tags, "swapped")}, nil
	})
	// anyOut's output type is any, which registration accepts; the
	// channel it returns cannot be encoded when the task runs.
	anyOut = ray.NewTask("backendtest.anyOut", func(ctx context.Context, _ int) (any, error) {
		return make(chan int), nil
	})

	whereAmI = ray.NewTask("backendtest.where", func(ctx context.Context, key string) (where, error) {
		rc, ok := ray.Runtime(ctx)
		if !ok {
			return where{}, errors.New("no runtime context")
		}
		return where{Node: rc.NodeName(), Labels: rc.NodeLabels(), Bundle: rc.BundleIndex(),
			Env: rc.Env(key), Attempt: rc.Attempt(), Task: rc.TaskName(), CPU: rc.Resources()[ray.CPU]}, nil
	})

	// block waits until its gate opens or ctx ends; it returns "opened" or
	// "cancelled".
	block = ray.NewTask("backendtest.block", blockOn)

	// stubborn waits until its gate opens, ignoring ctx, as code that
	// never looks at its context does.
	stubborn = ray.NewTask("backendtest.stubborn", func(ctx context.Context, gate string) (string, error) {
		return blockOn(context.WithoutCancel(ctx), gate)
	})

	counterClass = ray.NewActorClass("backendtest.counter", func(ctx context.Context, start int) (*counter, error) {
		if start < 0 {
			return nil, fmt.Errorf("negative start %d", start)
		}
		return &counter{n: start}, nil
	})
	counterAdd = ray.NewMethod(counterClass, "add", func(ctx context.Context, c *counter, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
	counterLog = ray.NewMethod(counterClass, "log", func(ctx context.Context, c *counter, s string) ([]string, error) {
		c.log = append(c.log, s)
		return c.log, nil
	})
	counterPanic = ray.NewMethod(counterClass, "panic", func(ctx context.Context, c *counter, s string) (int, error) {
		panic(s)
	})
	counterWhere = ray.NewMethod(counterClass, "where", func(ctx context.Context, c *counter, key string) (where, error) {
		rc, _ := ray.Runtime(ctx)
		return where{Node: rc.NodeName(), Bundle: rc.BundleIndex(), Env: rc.Env(key), Attempt: rc.Attempt(), Task: rc.TaskName()}, nil
	})
	counterBlock = ray.NewMethod(counterClass, "block", func(ctx context.Context, c *counter, gate string) (string, error) {
		return blockOn(ctx, gate)
	})

	// otherCounter has the same Go type as counter, to check that the
	// backend refuses a method of one class on an actor of another.
	otherCounterClass = ray.NewActorClass("backendtest.otherCounter", func(ctx context.Context, start int) (*counter, error) {
		return &counter{n: start}, nil
	})
)

type counter struct {
	n   int
	log []string
}

type point struct {
	X, Y int
	Tags []string
}

type where struct {
	Node    string
	Labels  map[string]string
	Bundle  int
	Env     string
	Attempt int
	Task    string
	CPU     float64
}

// Gates coordinate blocking tasks with the test. A gate lives in the test
// process. A task that runs in the test process (an in-process backend)
// uses it directly; a task that runs in another process (a worker of a
// multi-process backend) reaches it over HTTP on loopback: while the suite
// runs, a gate server listens on 127.0.0.1 and every gate's name carries
// its address ("gate-3@127.0.0.1:41234"). The test-facing API is the same
// either way: newGate, arrivedCh, cancelCh, release, count.
var gates = struct {
	sync.Mutex
	m     map[string]*gate
	next  int
	srv   *http.Server
	addr  string
	done  chan struct{}
	users int
}{m: map[string]*gate{}}

type gate struct {
	open       chan struct{}
	mu         sync.Mutex
	arrivedN   int
	arrivedCh  chan struct{}
	cancelledN int
	want       int
	cancelCh   chan struct{}
	openOnce   sync.Once
}

func newGate(want int) (string, *gate) {
	gates.Lock()
	defer gates.Unlock()
	gates.next++
	name := "gate-" + strconv.Itoa(gates.next)
	if gates.addr != "" {
		name += "@" + gates.addr
	}
	g := &gate{open: make(chan struct{}), arrivedCh: make(chan struct{}), cancelCh: make(chan struct{}), want: want}
	gates.m[name] = g
	return name, g
}

func lookupGate(name string) *gate {
	gates.Lock()
	defer gates.Unlock()
	return gates.m[name]
}

func (g *gate) arrived() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrivedN++
	if g.arrivedN == g.want {
		close(g.arrivedCh)
	}
}

func (g *gate) cancelled() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancelledN++
	if g.cancelledN == g.want {
		close(g.cancelCh)
	}
}

func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrivedN
}

func blockOn(ctx context.Context, name string) (string, error) {
	g := lookupGate(name)
	if g == nil {
		_, addr, ok := strings.Cut(name, "@")
		if !ok {
			panic("backendtest: unknown gate " + name)
		}
		return blockRemote(ctx, name, addr)
	}
	g.arrived()
	select {
	case <-g.open:
		return "opened", nil
	case <-ctx.Done():
		g.cancelled()
		return "cancelled", ctx.Err()
	}
}

// useGateServer runs the gate server while t runs.
func useGateServer(t *testing.T) {
	gates.Lock()
	defer gates.Unlock()
	if gates.users == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("backendtest: gate server: %v", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("POST /arrive", gateHandler(func(w http.ResponseWriter, r *http.Request, g *gate) { g.arrived() }))
		mux.HandleFunc("POST /cancelled", gateHandler(func(w http.ResponseWriter, r *http.Request, g *gate) { g.cancelled() }))
		mux.HandleFunc("GET /wait", gateHandler(func(w http.ResponseWriter, r *http.Request, g *gate) {
			select {
			case <-g.open:
			case <-r.Context().Done():
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		gates.srv = &http.Server{Handler: mux, ReadHeaderTimeout: patience}
		gates.addr = ln.Addr().String()
		gates.done = make(chan struct{})
		go func(srv *http.Server, done chan struct{}) {
			defer close(done)
			srv.Serve(ln) //nolint:errcheck // ErrServerClosed
		}(gates.srv, gates.done)
	}
	gates.users++
	t.Cleanup(func() {
		gates.Lock()
		defer gates.Unlock()
		if gates.users--; gates.users == 0 {
			gates.srv.Close()
			<-gates.done
			gates.srv, gates.addr = nil, ""
		}
	})
}

func gateHandler(f func(w http.ResponseWriter, r *http.Request, g *gate)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g := lookupGate(r.URL.Query().Get("gate"))
		if g == nil {
			http.Error(w, "unknown gate", http.StatusNotFound)
			return
		}
		f(w, r, g)
	}
}

// gateClient is the HTTP client of tasks that reach a gate in the test
// process.
var gateClient = &http.Client{Timeout: 2 * patience}

func gateCall(ctx context.Context, method, addr, path, name string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path+"?gate="+url.QueryEscape(name), nil)
	if err != nil {
		return err
	}
	resp, err := gateClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("gate %s%s: %s", addr, path, resp.Status)
	}
	return nil
}

// blockRemote is blockOn for a gate in another process.
func blockRemote(ctx context.Context, name, addr string) (string, error) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), patience)
	defer cancel()
	if err := gateCall(bg, http.MethodPost, addr, "/arrive", name); err != nil {
		return "", err
	}
	err := gateCall(ctx, http.MethodGet, addr, "/wait", name)
	if ctx.Err() != nil {
		if err := gateCall(bg, http.MethodPost, addr, "/cancelled", name); err != nil {
			return "", err
		}
		return "cancelled", ctx.Err()
	}
	if err != nil {
		return "", err
	}
	return "opened", nil
}
