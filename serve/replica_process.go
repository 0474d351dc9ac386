package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/worker"
)

// ProcessSpec describes an external HTTP server, such as a vLLM server,
// that a replica runs on host 0 of its slice, and the router proxies
// /<deployment>/<path> to as /<path>.
//
// Every process gets the environment of the serving program, then its
// host's TPU env from the slice reservation (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES, TPU_NAME, ...), then Env, then PORT. Command is
// required; the other fields' zero values mean their defaults.
type ProcessSpec struct {
	// Command is the server program and its arguments, run on host 0.
	// "{host}" and "{port}" in an argument are replaced by the address
	// the server must listen on, also in the env as HOST and PORT: the
	// address the driver reaches host 0's worker by (its pod's IP on
	// Kubernetes, 127.0.0.1 on the simulator). A vLLM server takes
	// "--host", "{host}", "--port", "{port}".
	Command []string
	// WorkerCommand, if set, runs on every other host of the slice (a
	// multi-host server's workers), with the same substitutions.
	WorkerCommand []string
	// Env is added to every process's environment.
	Env map[string]string
	// HealthPath is fetched with GET until it answers 200 before the
	// replica takes traffic, and at every health check; "" means "/".
	HealthPath string
	// StartTimeout bounds the wait for the first 200; 0 means 10 minutes.
	StartTimeout time.Duration
	// StopTimeout is how long a stopping server has after SIGTERM before
	// it is killed; 0 means 10s.
	StopTimeout time.Duration
}

// Process returns a Replica that runs spec's server on host 0 of each
// replica's slice (and WorkerCommand on the other hosts), through an actor
// pinned to each host.
func Process(spec ProcessSpec) Replica { return &processReplica{spec: spec} }

type processReplica struct{ spec ProcessSpec }

func (p *processReplica) validate() error {
	if len(p.spec.Command) == 0 {
		return errors.New("serve.Process: empty Command")
	}
	if p.spec.StartTimeout < 0 || p.spec.StopTimeout < 0 {
		return errors.New("serve.Process: negative StartTimeout or StopTimeout")
	}
	return nil
}

// hostProcessSpec is the constructor input of the per-host actor.
type hostProcessSpec struct {
	Command      []string
	Env          map[string]string
	HealthPath   string // "" for a worker host
	StartTimeout time.Duration
	StopTimeout  time.Duration
}

// hostProcess is the actor on each host of a process replica: it owns the
// host's process.
type hostProcess struct {
	spec   hostProcessSpec
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *tail

	mu      sync.Mutex
	waitErr error
}

var (
	hostProcessClass = ray.NewActorClass("serve.hostProcess", newHostProcess)
	hostProcessAddr  = ray.NewMethod(hostProcessClass, "addr", func(ctx context.Context, p *hostProcess, _ struct{}) (string, error) {
		return p.addr, nil
	})
	hostProcessCheck = ray.NewMethod(hostProcessClass, "check", func(ctx context.Context, p *hostProcess, _ struct{}) (struct{}, error) {
		return struct{}{}, p.check(ctx)
	})
	hostProcessStop = ray.NewMethod(hostProcessClass, "stop", func(ctx context.Context, p *hostProcess, _ struct{}) (struct{}, error) {
		p.stop(ctx)
		return struct{}{}, nil
	})
)

func newHostProcess(ctx context.Context, spec hostProcessSpec) (*hostProcess, error) {
	p := &hostProcess{spec: spec, exited: make(chan struct{}), out: &tail{max: 4 << 10}}
	if len(spec.Command) == 0 {
		close(p.exited)
		return p, nil
	}
	// The server listens where the driver reaches this worker: its pod's
	// IP on Kubernetes, loopback on the simulator.
	host := cmp.Or(worker.Host(), "127.0.0.1")
	port, err := freePort(host)
	if err != nil {
		return nil, err
	}
	p.addr = net.JoinHostPort(host, strconv.Itoa(port))
	args := make([]string, len(spec.Command))
	for i, a := range spec.Command {
		args[i] = strings.NewReplacer("{port}", strconv.Itoa(port), "{host}", host).Replace(a)
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	if rc, ok := ray.Runtime(ctx); ok {
		maps.Copy(env, rc.Environ())
	}
	maps.Copy(env, spec.Env)
	env["PORT"], env["HOST"] = strconv.Itoa(port), host
	p.cmd = exec.Command(args[0], args[1:]...)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		p.cmd.Env = append(p.cmd.Env, k+"="+env[k])
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %q: %w", args[0], err)
	}
	go func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	// The actor's context ends when the actor dies: the process goes too.
	go func() {
		select {
		case <-ctx.Done():
			_ = p.cmd.Process.Kill()
		case <-p.exited:
		}
	}()
	if spec.HealthPath == "" {
		return p, nil
	}
	if err := p.waitHealthy(ctx); err != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return nil, err
	}
	return p, nil
}

// waitHealthy polls the health path until it answers 200.
func (p *hostProcess) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(p.spec.StartTimeout, 10*time.Minute))
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := p.probe(ctx); err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("server %q exited before it was healthy: %v; output: %s", p.spec.Command[0], p.exitErr(), p.out.String())
		case <-ctx.Done():
			return fmt.Errorf("server %q not healthy at http://%s%s: %w", p.spec.Command[0], p.addr, p.spec.HealthPath, ctx.Err())
		case <-tick.C:
		}
	}
}

func (p *hostProcess) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

func (p *hostProcess) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+p.spec.HealthPath, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", p.spec.HealthPath, resp.Status)
	}
	return nil
}

func (p *hostProcess) check(ctx context.Context) error {
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.exited:
		return fmt.Errorf("server %q exited: %v", p.spec.Command[0], p.exitErr())
	default:
	}
	if p.spec.HealthPath == "" {
		return nil
	}
	return p.probe(ctx)
}

func (p *hostProcess) stop(ctx context.Context) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	t := time.NewTimer(cmp.Or(p.spec.StopTimeout, 10*time.Second))
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *processReplica) start(ctx context.Context, c *ray.Cluster, spg placement, maxConcurrent int) (instance, error) {
	pg, per := spg.PlacementGroup(), spg.BundlesPerHost()
	inst := &processInstance{hosts: make([]*ray.ActorHandle[*hostProcess], spg.NumHosts())}
	for i := range inst.hosts {
		hs := hostProcessSpec{Env: p.spec.Env, StartTimeout: p.spec.StartTimeout, StopTimeout: p.spec.StopTimeout}
		if i == 0 {
			hs.Command, hs.HealthPath = p.spec.Command, cmp.Or(p.spec.HealthPath, "/")
		} else {
			hs.Command = p.spec.WorkerCommand
		}
		inst.hosts[i] = hostProcessClass.Remote(ctx, c, hs, ray.InBundle(pg, i*per), ray.MaxConcurrency(4))
	}
	for i, h := range inst.hosts {
		if err := h.Ready(ctx); err != nil {
			inst.close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("process on host %d: %w", i, err)
		}
	}
	addr, err := hostProcessAddr.Remote(ctx, inst.hosts[0], struct{}{}).Get(ctx)
	if err != nil {
		inst.close(context.WithoutCancel(ctx))
		return nil, err
	}
	inst.base, inst.addr = "http://"+addr, addr
	return inst, nil
}

type processInstance struct {
	hosts []*ray.ActorHandle[*hostProcess]
	base  string // http://addr
	addr  string // its server's host:port
}

func (p *processInstance) check(ctx context.Context) error {
	for i, h := range p.hosts {
		if _, err := hostProcessCheck.Remote(ctx, h, struct{}{}).Get(ctx); err != nil {
			return fmt.Errorf("host %d: %w", i, err)
		}
	}
	return nil
}

func (p *processInstance) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	refs := make([]ray.ObjectRef[struct{}], len(p.hosts))
	for i, h := range p.hosts {
		refs[i] = hostProcessStop.Remote(ctx, h, struct{}{})
	}
	for i, h := range p.hosts {
		_, _ = refs[i].Get(ctx)
		_ = h.Kill(ctx)
	}
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
