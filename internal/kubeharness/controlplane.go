//go:build e2e

package kubeharness

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options configure Start. A nil *Options means all defaults.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-scheduler (and kwok with
	// kwok-stages.yaml for kwok pools). Default: BinDir().
	BinDir string
	// Images maps container images to local binaries for the node agent,
	// on top of the built-in table (see the package doc). A key without a
	// tag matches every tag of that image; an exact "image:tag" key wins.
	// An empty value means the image has no entrypoint: the container's
	// command is looked up on the host PATH.
	Images map[string]string
	// APIServerArgs, SchedulerArgs and ControllerManagerArgs are appended to the harness's flags
	// (a later flag wins), e.g. "--enable-admission-plugins=ExtendedResourceToleration".
	APIServerArgs         []string
	SchedulerArgs         []string
	ControllerManagerArgs []string
	// StartTimeout bounds the start of each component. Default 90s.
	StartTimeout time.Duration
	// ClientQPS and ClientBurst configure Config() and the node agent.
	// Defaults 1000 and 2000 (the harness creates thousands of objects).
	ClientQPS   float32
	ClientBurst int
	// Network says how pods are networked: NetworkLoopback (the default)
	// or NetworkIsolated (a network namespace per pod and cluster DNS from
	// CoreDNS; Start skips the test where namespaces cannot be made).
	Network Network
}

// ControlPlane is a running etcd + kube-apiserver + kube-scheduler on
// loopback, with a node agent that runs pods bound to agent nodes as local
// processes, and, once a kwok node pool is added, kwok. It is created by
// Start and torn down by the test's cleanup; the zero value is not usable.
// Its methods are safe for concurrent use.
type ControlPlane struct {
	tb     testing.TB
	opts   Options
	binDir string
	runDir string
	keep   bool

	token  string
	caPEM  []byte
	config *rest.Config
	client kubernetes.Interface
	ips    *ipAllocator
	agent  *nodeAgent
	net    *podNetwork // NetworkIsolated only
	// plugins serve the TPU device plugin's metrics of the agent's TPU
	// nodes (chipmetrics.go).
	plugins pluginServers

	apiURL       string
	apiPort      int
	schedPort    int
	kubeconfig   string
	startupTimes StartupTimes

	mu    sync.Mutex
	procs []*process // in start order; stopped in reverse
	// api and apiArgs are the running kube-apiserver (nil while
	// StopAPIServer has it stopped) and its flags.
	api     *process
	apiArgs []string
	kwok    *process
	down    bool

	kwokMu   sync.Mutex
	stopOnce sync.Once
}

// StartupTimes are the wall-clock durations of Start, per component.
type StartupTimes struct {
	Etcd, APIServer, Scheduler, ControllerManager, DNS, Agent, Total time.Duration
}

// Start starts a control plane for tb and registers its teardown with
// tb.Cleanup. The teardown also runs on SIGINT/SIGTERM; a test that panics
// still runs its cleanups; and every child process has a parent-death
// signal, so nothing the harness started outlives the test binary.
//
// Start skips tb unless GORAY_E2E=1, and with GORAY_E2E=1 fails tb if the
// binaries are missing.
func Start(tb testing.TB, opts *Options) *ControlPlane {
	tb.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	dir, msg, err := checkEnvironment(o.BinDir)
	if errors.Is(err, errSkip) {
		tb.Skip(msg)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 90 * time.Second
	}
	if o.ClientQPS <= 0 {
		o.ClientQPS = 1000
	}
	if o.ClientBurst <= 0 {
		o.ClientBurst = 2000
	}
	if o.Network == NetworkIsolated {
		if err := CheckIsolatedNetwork(); err != nil {
			tb.Skipf("kubeharness: this test needs network-isolated pods (NetworkIsolated), which cannot run here: %v", err)
		}
	}
	reapStaleRunDirs()
	runDir, err := os.MkdirTemp("", runDirPrefix)
	if err != nil {
		tb.Fatalf("kubeharness: run folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(runDir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		tb.Fatalf("kubeharness: run folder: %v", err)
	}
	cp := &ControlPlane{
		tb:     tb,
		opts:   o,
		binDir: dir,
		runDir: runDir,
		keep:   os.Getenv(EnvKeep) == "1",
		ips:    newIPAllocator(),
	}
	registerLive(cp)
	tb.Cleanup(cp.stop)
	// Free ports are picked before the components bind them, so another
	// process may take one in between; that start is retried on new ports.
	for attempt := 1; ; attempt++ {
		err := cp.start()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			tb.Fatalf("kubeharness: %v", err)
		}
		tb.Logf("kubeharness: port taken during start, retrying on new ports: %v", err)
		cp.resetForRetry()
	}
	return cp
}

// Config returns a copy of the admin client configuration (bearer token,
// the apiserver's self-signed CA) for https://127.0.0.1:<port>, or with
// NetworkIsolated https://<HostIP>:<port>, where pods reach it too.
func (cp *ControlPlane) Config() *rest.Config { return rest.CopyConfig(cp.config) }

// Client returns an admin clientset for the control plane.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// Kubeconfig returns the path of an admin kubeconfig file, e.g. for
// `kubectl --kubeconfig` while debugging with GORAY_K8S_KEEP=1.
func (cp *ControlPlane) Kubeconfig() string { return cp.kubeconfig }

// RunDir returns the run folder: logs/<component>.log, pods/<ns>_<pod>_<uid>/,
// etcd data and certs. It is removed on teardown unless GORAY_K8S_KEEP=1.
func (cp *ControlPlane) RunDir() string { return cp.runDir }

// ComponentLog returns the path of a component's combined stdout/stderr:
// "etcd", "kube-apiserver", "kube-scheduler" or "kwok".
func (cp *ControlPlane) ComponentLog(component string) string {
	return filepath.Join(cp.runDir, "logs", component+".log")
}

// StartupTimes returns how long Start took, per component.
func (cp *ControlPlane) StartupTimes() StartupTimes { return cp.startupTimes }

func (cp *ControlPlane) start() error {
	t0 := time.Now()
	for _, d := range []string{"etcd", "certs", "logs", "pods"} {
		if err := os.MkdirAll(filepath.Join(cp.runDir, d), 0o755); err != nil {
			return err
		}
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdPort, peerPort, apiPort, schedPort := ports[0], ports[1], ports[2], ports[3]
	kcmPort, dnsReadyPort := ports[4], ports[5]
	cp.apiPort, cp.schedPort = apiPort, schedPort
	// With isolated pods the apiserver listens on the pod network's
	// gateway, so that pods reach it (as in-cluster clients do) and its
	// self-signed certificate names that address; else on loopback.
	apiHost := "127.0.0.1"
	if cp.opts.Network == NetworkIsolated {
		if cp.net == nil {
			if cp.net, err = newPodNetwork(); err != nil {
				return err
			}
		}
		apiHost = cp.net.gw.String()
	}
	cp.apiURL = fmt.Sprintf("https://%s:%d", apiHost, apiPort)

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	cp.token = hex.EncodeToString(tok)
	certs := filepath.Join(cp.runDir, "certs")
	tokens := filepath.Join(certs, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(cp.token+",kubeharness-admin,kubeharness-admin-uid,system:masters\n"), 0o600); err != nil {
		return err
	}
	saKey := filepath.Join(certs, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return err
	}

	// etcd
	t := time.Now()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcd, err := cp.run("etcd",
		"--name=kubeharness", "--data-dir="+filepath.Join(cp.runDir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubeharness="+peerURL,
		"--unsafe-no-fsync=true", "--log-level=warn")
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := cp.waitHTTP(etcd, plain, etcdURL+"/health", `"health":"true"`); err != nil {
		return err
	}
	cp.startupTimes.Etcd = time.Since(t)

	// kube-apiserver, with its own self-signed serving cert in --cert-dir.
	t = time.Now()
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + apiHost, "--advertise-address=" + apiHost,
		fmt.Sprintf("--secure-port=%d", apiPort),
		// 127.0.0.1 may not be advertised with the lease reconciler.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + certs, "--token-auth-file=" + tokens, "--authorization-mode=RBAC",
		"--service-account-issuer=" + cp.apiURL,
		"--service-account-key-file=" + saKey, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// The controller manager runs without the node lifecycle
		// controller (nothing would remove the not-ready taint), and the
		// agent mounts no service-account token volumes.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--allow-privileged=true", "--profiling=false",
	}
	cp.apiArgs = append(apiArgs, cp.opts.APIServerArgs...)
	api, err := cp.run("kube-apiserver", cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	cp.api = api
	cp.mu.Unlock()
	if err := cp.waitCA(api, filepath.Join(certs, "apiserver.crt")); err != nil {
		return err
	}
	cp.config = &rest.Config{
		Host:            cp.apiURL,
		BearerToken:     cp.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.caPEM},
		QPS:             cp.opts.ClientQPS,
		Burst:           cp.opts.ClientBurst,
		UserAgent:       "kubeharness",
	}
	if cp.client, err = kubernetes.NewForConfig(cp.config); err != nil {
		return err
	}
	if err := cp.waitAPIServerReady(api); err != nil {
		return err
	}
	cp.startupTimes.APIServer = time.Since(t)
	if err := cp.writeKubeconfig(); err != nil {
		return err
	}

	// kube-scheduler
	t = time.Now()
	schedCfg := filepath.Join(cp.runDir, "kube-scheduler.yaml")
	err = os.WriteFile(schedCfg, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
clientConnection: {kubeconfig: %q, qps: 500, burst: 1000}
`, cp.kubeconfig)), 0o644)
	if err != nil {
		return err
	}
	schedArgs := []string{
		"--config=" + schedCfg, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", schedPort),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=2",
	}
	sched, err := cp.run("kube-scheduler", append(schedArgs, cp.opts.SchedulerArgs...)...)
	if err != nil {
		return err
	}
	// The scheduler serves a self-signed cert of its own; it is only a
	// readiness probe on loopback.
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback readiness probe
	}}
	if err := cp.waitHTTP(sched, insecure, fmt.Sprintf("https://127.0.0.1:%d/readyz", schedPort), "ok"); err != nil {
		return err
	}
	cp.startupTimes.Scheduler = time.Since(t)

	// kube-controller-manager
	t = time.Now()
	if err := cp.startControllerManager(kcmPort, insecure); err != nil {
		return err
	}
	cp.startupTimes.ControllerManager = time.Since(t)

	// CoreDNS on the pod network
	if cp.net != nil {
		t = time.Now()
		if err := cp.startCoreDNS(dnsReadyPort); err != nil {
			return err
		}
		cp.startupTimes.DNS = time.Since(t)
	}

	// node agent
	t = time.Now()
	agentCfg := cp.Config()
	agentCfg.UserAgent = "kubeharness-node-agent"
	if cp.agent, err = newNodeAgent(agentCfg, cp.agentConfig()); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cp.opts.StartTimeout)
	defer cancel()
	if err := cp.agent.start(ctx); err != nil {
		return err
	}
	cp.startupTimes.Agent = time.Since(t)
	cp.startupTimes.Total = time.Since(t0)
	s := cp.startupTimes
	cp.tb.Logf("kubeharness: control plane %s up in %v (etcd %v, kube-apiserver %v, kube-scheduler %v, kube-controller-manager %v, dns %v, agent %v); run folder %s",
		cp.apiURL, s.Total.Round(time.Millisecond), s.Etcd.Round(time.Millisecond), s.APIServer.Round(time.Millisecond),
		s.Scheduler.Round(time.Millisecond), s.ControllerManager.Round(time.Millisecond), s.DNS.Round(time.Millisecond),
		s.Agent.Round(time.Millisecond), cp.runDir)
	return nil
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 3 s)
// and returns once it has exited: every client's connection to it is
// closed and new ones are refused, as during a control-plane outage or a
// GKE control-plane upgrade. Pods keep running; nothing reaches the API
// until StartAPIServer. It is an error to stop it twice.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	p := cp.api
	if p == nil || cp.down {
		cp.mu.Unlock()
		return errors.New("stop kube-apiserver: it is not running")
	}
	cp.api = nil
	cp.mu.Unlock()
	p.stop(3 * time.Second)
	cp.tb.Logf("kubeharness: kube-apiserver stopped")
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// same flags, address and certificates (etcd kept every object), and
// returns once it is ready.
func (cp *ControlPlane) StartAPIServer() error {
	cp.mu.Lock()
	running := cp.api != nil
	cp.mu.Unlock()
	if running {
		return errors.New("start kube-apiserver: it is running")
	}
	t := time.Now()
	api, err := cp.run("kube-apiserver", cp.apiArgs...)
	if err != nil {
		return err
	}
	if err := cp.waitAPIServerReady(api); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.api = api
	cp.mu.Unlock()
	cp.tb.Logf("kubeharness: kube-apiserver started again, ready in %v", time.Since(t).Round(time.Millisecond))
	return nil
}

// run starts a binary of the bin folder with its output in logs/<name>.log.
func (cp *ControlPlane) run(name string, args ...string) (*process, error) {
	return cp.runAt(name, filepath.Join(cp.binDir, name), nil, args...)
}

// runAt starts the binary at path with its output in logs/<name>.log and
// env added to the test's environment; it is stopped with the control
// plane.
func (cp *ControlPlane) runAt(name, path string, env []string, args ...string) (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.down {
		return nil, fmt.Errorf("start %s: control plane is torn down", name)
	}
	logf, err := os.OpenFile(cp.ComponentLog(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(path, args...)
	cmd.Dir = cp.runDir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	p, err := startProcess(name, cmd)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// waitFor polls cond every 50 ms until it returns true, the process dies
// or the start timeout passes.
func (cp *ControlPlane) waitFor(p *process, what string, cond func() bool) error {
	deadline := time.Now().Add(cp.opts.StartTimeout)
	for {
		if cond() {
			return nil
		}
		if p.exited() {
			code, _ := p.exitStatus()
			return fmt.Errorf("%s exited with code %d while waiting for %s; log tail:\n%s",
				p.name, code, what, tail(cp.ComponentLog(p.name), 30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s after %v; log tail:\n%s", p.name, what, cp.opts.StartTimeout,
				tail(cp.ComponentLog(p.name), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (cp *ControlPlane) waitHTTP(p *process, c *http.Client, url, want string) error {
	return cp.waitFor(p, url, func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), want)
	})
}

// waitCA waits for the apiserver's self-signed apiserver.crt: the serving
// certificate followed by the CA that signed it. The CA is the second PEM
// block (its SANs are 127.0.0.1, 10.0.0.1 and kubernetes.*, not localhost).
func (cp *ControlPlane) waitCA(p *process, crtPath string) error {
	return cp.waitFor(p, crtPath, func() bool {
		b, err := os.ReadFile(crtPath)
		if err != nil {
			return false
		}
		var blocks []*pem.Block
		for rest := b; ; {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			blocks = append(blocks, blk)
		}
		if len(blocks) < 2 {
			return false
		}
		if _, err := x509.ParseCertificate(blocks[1].Bytes); err != nil {
			return false
		}
		cp.caPEM = pem.EncodeToMemory(blocks[1])
		return os.WriteFile(filepath.Join(filepath.Dir(crtPath), "ca.crt"), cp.caPEM, 0o644) == nil
	})
}

func (cp *ControlPlane) waitAPIServerReady(p *process) error {
	rc := cp.client.Discovery().RESTClient()
	return cp.waitFor(p, "/readyz and the default namespace", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		b, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil || string(b) != "ok" {
			return false
		}
		_, err = cp.client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

func (cp *ControlPlane) writeKubeconfig() error {
	cp.kubeconfig = filepath.Join(cp.runDir, "kubeconfig")
	return os.WriteFile(cp.kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubeharness
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubeharness-admin
  user:
    token: %s
contexts:
- name: kubeharness
  context: {cluster: kubeharness, user: kubeharness-admin}
current-context: kubeharness
`, cp.apiURL, filepath.Join(cp.runDir, "certs", "ca.crt"), cp.token)), 0o600)
}

// stop tears the control plane down: pods first, then kwok, the scheduler,
// the apiserver and etcd, each by its own PID. It is idempotent.
func (cp *ControlPlane) stop() {
	cp.stopOnce.Do(func() {
		defer unregisterLive(cp)
		if cp.agent != nil {
			cp.agent.stop()
		}
		cp.plugins.close()
		cp.mu.Lock()
		cp.down = true
		procs := append([]*process(nil), cp.procs...)
		cp.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(3 * time.Second)
		}
		if cp.net != nil {
			cp.net.close()
		}
		cp.ips.release() // after every process that bound its addresses ended
		if cp.tb.Failed() {
			for _, p := range procs {
				cp.tb.Logf("kubeharness: tail of %s log:\n%s", p.name, tail(cp.ComponentLog(p.name), 40))
			}
		}
		if cp.keep {
			cp.tb.Logf("kubeharness: kept run folder %s (%s=1)", cp.runDir, EnvKeep)
			return
		}
		if err := os.RemoveAll(cp.runDir); err != nil {
			cp.tb.Errorf("kubeharness: remove run folder: %v", err)
		}
	})
}

// resetForRetry stops the processes of a failed start and empties the run
// folder's state, logs included.
func (cp *ControlPlane) resetForRetry() {
	cp.mu.Lock()
	procs := cp.procs
	cp.procs = nil
	cp.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(0)
	}
	for _, d := range []string{"etcd", "certs", "logs"} {
		_ = os.RemoveAll(filepath.Join(cp.runDir, d))
	}
}

// kill is the signal-handler path: SIGKILL everything at once, remove the
// run folder, no API calls.
func (cp *ControlPlane) kill() {
	if cp.agent != nil {
		cp.agent.kill()
	}
	cp.mu.Lock()
	cp.down = true
	procs := append([]*process(nil), cp.procs...)
	cp.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(0)
	}
	if cp.net != nil {
		cp.net.close()
	}
	if !cp.keep {
		_ = os.RemoveAll(cp.runDir)
	}
}

const (
	runDirPrefix = "kubeharness-"
	ownerFile    = "owner.pid"
)

// reapStaleRunDirs removes the run folders of test binaries that died
// without cleanup (SIGKILL, go test -timeout): their processes died with
// them (parent-death signal), only the folder is left. A folder is stale
// when the PID in its owner.pid is gone; GORAY_K8S_KEEP folders have no
// live owner either, so they are left alone when keeping is on.
func reapStaleRunDirs() {
	if os.Getenv(EnvKeep) == "1" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeRSAKey(path string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	return os.WriteFile(path, b, 0o600)
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// HostIP returns the address at which pods reach the test process (the
// driver of a test): the pod network's gateway with NetworkIsolated, where
// a server of the test must listen on it (or on all addresses) to be
// reached; 127.0.0.1 with NetworkLoopback.
func (cp *ControlPlane) HostIP() string {
	if cp.net != nil {
		return cp.net.gw.String()
	}
	return "127.0.0.1"
}

// NetworkNamespaces returns the names of the pod network namespaces that
// exist now (NetworkIsolated; nil otherwise), for tests that check nothing
// is left once the pods are gone. A namespace is removed when its pod's
// processes have stopped.
func (cp *ControlPlane) NetworkNamespaces() []string {
	if cp.net == nil {
		return nil
	}
	return cp.net.namespaces()
}
