package kubernetes

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/worker"
)

// Runner is the runner of the Kubernetes backend (a cluster.Runner and
// cluster.ClaimRunner): work runs in worker pods that run the user's own
// image in worker mode (its main calls ray.Main first), dialled through
// package worker.
//
//   - A reserved TPU host gets one pod per reservation (Reserved; a host
//     the runtime claims for TPU work outside reservations too), pinned
//     to its node, requesting the host's google.com/tpu chips (requests =
//     limits), with the reservation's env (TPU_WORKER_ID,
//     TPU_WORKER_HOSTNAMES as DNS names of the headless Service,
//     MEGASCALE_*). On capacity this driver provisioned, the host's
//     capacity pod, a worker pod in waiting, becomes its pod instead
//     (adoptPod): it gets the env in the handshake. The reservation's work
//     (in its placement group), or on a claimed host the work holding
//     chips, runs there (podForLocked). Released deletes them.
//   - Other work on a node runs in one CPU pod per node, started when work
//     is first placed there (or with the cluster, for CPUPool.Min nodes),
//     and deleted once idle for CPUPool.IdleTimeout while more than
//     CPUPool.Min run: the pool follows the demand between Min and Max.
//
// Every object carries LabelCluster and is owned by the cluster's token
// Secret, so one cluster handle's objects can be listed and collected.
// A worker pod that is deleted, evicted or fails, or whose connection is
// lost, loses its node (cluster.LostFunc).
type Runner struct {
	client kubernetes.Interface
	cfg    Config
	log    *slog.Logger
	pt     podTemplate
	token  string

	local backend.Executor
	copts worker.ClientOptions
	// output keeps the workers' last lines per node (RecentOutput).
	output worker.OutputLog
	lost   cluster.LostFunc
	// gone is told when a lost worker's pod has been deleted (the
	// backend sets it to Source.WorkerGone).
	gone func(node string)
	// leaseLost is asked, before a lost worker's node is reported, whether
	// the loss means its slice's Lease was lost (Source.PodLost): then the
	// node is reported lost with that error, for good.
	leaseLost func(node string, cause error) error
	pods      listersv1.PodLister
	factory   informers.SharedInformerFactory
	stop      context.CancelFunc
	bg        sync.WaitGroup
	// runCtx ends when Close starts: pod starts in flight give up.
	runCtx    context.Context
	cancelRun context.CancelFunc

	// ca signs the handle's TLS certificates; driverCert is the one new
	// dials present, renewed with the workers' (renew.go).
	ca         *worker.CA
	driverCert atomic.Pointer[tls.Certificate]
	secretGen  int      // guarded by mu: the last renewed Secret generation
	secrets    []string // guarded by mu: renewed Secrets still kept

	created atomic.Int64 // pods created, for tests

	mu       sync.Mutex
	closed   bool
	nodes    map[string]cluster.Node
	reserved map[string]*podWorker   // by node: the reservation's pod
	cpuPods  map[string]*podWorker   // by node
	claims   map[string][]*podWorker // by claim ID
	byPod    map[string]*podWorker   // by pod name
	// adoptions returns the capacity pods that become a claim's worker
	// pods, by the runtime name of their host (Source.adoptionsOf): the
	// source keeps them when it claims the slices, HostNames names the
	// hosts by them and Reserved adopts them. nil: none.
	adoptions func(claimID string) map[string]string
	// dropAdoptions tells the source that Released deleted a claim's
	// adopted pods (Source.dropAdoptions); nil: nothing to tell.
	dropAdoptions func(claimID string) []string
}

// podWorker is one worker pod and its connection.
type podWorker struct {
	name, node string
	// makeRoom is the Kubernetes node of a reservation's new pod, where
	// this handle's capacity pods bound after the claim are deleted while
	// the pod waits to run (waitRunning); "" for other pods.
	makeRoom string
	ready    chan struct{} // closed once client or err is set
	changed  chan struct{} // its pod changed in the watch (buffered 1)
	client   *worker.Client
	err      error
	released bool // deleted on purpose: not a loss
	// startFail, once set, fails the pod's start at once (failStart):
	// its node was lost or the pod deleted before its worker answered.
	startFail string
	lostOnce  sync.Once
	// busy counts the calls in flight and the actors living in a CPU
	// pod; idleSince is when it last went to 0 (r.mu guards both).
	busy      int
	idleSince time.Time
	// claim is the ID of the claim whose pod this is (Reserved); "" for
	// CPU pods.
	claim string
	// kueueSolo: a CPU pod in the LocalQueue mode, a Kueue pod group of
	// its own, whose Workload (named as the pod) goes with the pod.
	kueueSolo bool
}

// NewRunner returns the pod runner for cfg on client; id is the
// cluster handle's ID (LabelCluster and the object names).
func NewRunner(client kubernetes.Interface, cfg Config, id ClusterID) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	name := dnsName("goray", string(id))
	runCtx, cancelRun := context.WithCancel(context.Background())
	return &Runner{
		runCtx: runCtx, cancelRun: cancelRun,
		client: client, cfg: cfg, log: cfg.Logger,
		pt:    podTemplate{cfg: cfg, cluster: string(id), secret: name, service: name},
		nodes: map[string]cluster.Node{}, reserved: map[string]*podWorker{}, cpuPods: map[string]*podWorker{},
		claims: map[string][]*podWorker{}, byPod: map[string]*podWorker{},
	}, nil
}

// Start creates the token Secret and the headless Service, starts
// watching the cluster's pods and returns the executor that runs work in
// them (cluster.Runner).
func (r *Runner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	const op = "start Kubernetes workers"
	m, ok := worker.ManifestOf(exec)
	switch {
	case !ok:
		return nil, backend.Errorf(backend.InvalidArgument, op, "worker pods need the executor of package ray (ray.NewCluster passes it); %T cannot describe its registry", exec)
	case m.Codec == "":
		return nil, backend.Errorf(backend.InvalidArgument, op, "worker pods need a codec: values cross to the pods as bytes (do not set ray.Options.DisableCodec)")
	}
	r.local, r.lost, r.token = exec, lost, worker.NewToken()
	// The cluster's CA lives in this process only; the workers get its
	// certificate and one worker certificate through the Secret.
	ca, err := worker.NewCA(r.pt.cluster, caValidity)
	if err != nil {
		return nil, backend.Errorf(backend.Internal, op, "generate the cluster's TLS CA: %w", err)
	}
	r.ca = ca
	// Short-lived certificates, renewed at half their life (renew.go).
	workerCreds, driverCreds, err := r.issueCredentials()
	if err != nil {
		return nil, backend.Errorf(backend.Internal, op, "%w", err)
	}
	tlsConfig, err := driverCreds.ClientConfig()
	if err != nil {
		return nil, backend.Errorf(backend.Internal, op, "%w", err)
	}
	r.presentDriverCert(tlsConfig)
	prefix := worker.PrefixOutput(r.cfg.Worker.Stdout, r.cfg.Worker.Stderr)
	r.copts = worker.ClientOptions{Token: r.token, TLS: tlsConfig, Manifest: m, Logger: r.log,
		OnOutput: func(o worker.Output) {
			r.output.Record(o)
			prefix(o)
		}}
	ns := r.cfg.Namespace
	secret, err := r.client.CoreV1().Secrets(ns).Create(ctx, newSecret(r.pt.secret, ns, r.pt.cluster, r.token, workerCreds), metav1.CreateOptions{})
	if err != nil {
		return nil, backend.Wrap(apiCode(err), op+": create token Secret "+ns+"/"+r.pt.secret, err)
	}
	r.pt.owner = metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: secret.Name, UID: secret.UID}
	if _, err := r.client.CoreV1().Services(ns).Create(ctx, r.pt.headlessService(), metav1.CreateOptions{}); err != nil {
		r.deleteShared()
		return nil, backend.Wrap(apiCode(err), op+": create headless Service "+ns+"/"+r.pt.service, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	r.factory = informers.NewSharedInformerFactoryWithOptions(r.client, 10*time.Minute, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{LabelCluster: r.pt.cluster}.String()
		}))
	inf := r.factory.Core().V1().Pods()
	r.pods = inf.Lister()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { r.podChanged(cur, false) },
		DeleteFunc: func(obj any) { r.podChanged(obj, true) },
	}); err != nil {
		cancel()
		r.deleteShared()
		return nil, backend.Errorf(backend.Internal, op, "watch pods: %w", err)
	}
	r.factory.Start(wctx.Done())
	r.bg.Go(r.scaleDown)
	r.bg.Go(r.renewLoop)
	for _, ok := range r.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			r.Close()
			return nil, backend.Errorf(backend.Unavailable, op, "the pod watch did not sync: %w", ctx.Err())
		}
	}
	return worker.NodeExecutor{Local: exec, WorkerFor: r.workerFor}, nil
}

// podChanged reports the loss of a worker pod that is deleted, evicted
// or ended while in use.
func (r *Runner) podChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	r.mu.Lock()
	w := r.byPod[p.Name]
	released := w == nil || w.released
	r.mu.Unlock()
	if released {
		return
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
	cause := podGone(p, deleted)
	if cause == "" {
		return
	}
	if deleted || p.DeletionTimestamp != nil {
		r.failStart(w, cause)
	}
	r.workerLost(w, errors.New(cause))
}

// podGone says why worker pod p no longer serves, as last seen (deleted:
// its final state, from the watch's delete): deleted, being deleted or
// ended, with Kueue's reason when Kueue stopped it; "" while it runs.
func podGone(p *corev1.Pod, deleted bool) string {
	var cause string
	switch {
	case deleted:
		cause = fmt.Sprintf("worker pod %s was deleted", p.Name)
	case p.DeletionTimestamp != nil:
		cause = fmt.Sprintf("worker pod %s is being deleted", p.Name)
	case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
		return fmt.Sprintf("worker pod %s ended: %s %s %s", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	default:
		return ""
	}
	if why := kueueStopped(p); why != "" {
		cause += ": " + why
	}
	return cause
}

// lostLookup bounds connLost's look at the pod.
const lostLookup = 2 * time.Second

// connLost reports w lost after its connection broke. The break is often
// the first sign of a pod being stopped (its worker exits on SIGTERM
// before this driver's watch brings the pod's update), so the pod is read
// from the API server first: a pod deleted, being deleted or ended is
// reported as such (with why Kueue stopped it), as the watch would.
func (r *Runner) connLost(w *podWorker, err error) {
	ctx, cancel := context.WithTimeout(r.runCtx, lostLookup)
	p, gerr := r.client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, w.name, metav1.GetOptions{})
	cancel()
	var cause string
	switch {
	case gerr == nil:
		cause = podGone(p, false)
	case apierrors.IsNotFound(gerr):
		// Gone already: the watch's last view of it may still say why.
		cause = fmt.Sprintf("worker pod %s was deleted", w.name)
		if r.pods != nil {
			if last, lerr := r.pods.Pods(r.cfg.Namespace).Get(w.name); lerr == nil {
				cause = podGone(last, true)
			}
		}
	}
	if cause != "" {
		err = fmt.Errorf("%s (its connection: %w)", cause, err)
	}
	r.workerLost(w, err)
}

// workerLost drops w and reports its node lost, once.
func (r *Runner) workerLost(w *podWorker, cause error) {
	w.lostOnce.Do(func() {
		r.mu.Lock()
		if w.released {
			r.mu.Unlock()
			return
		}
		if r.cpuPods[w.node] == w {
			delete(r.cpuPods, w.node)
		}
		if r.reserved[w.node] == w {
			delete(r.reserved, w.node)
		}
		closed := r.closed
		r.mu.Unlock()
		r.log.Warn("worker pod lost", "pod", w.name, "node", w.node, "cause", cause)
		var leaseErr error
		if r.leaseLost != nil && !closed {
			leaseErr = r.leaseLost(w.node, cause)
		}
		if r.lost != nil {
			if leaseErr != nil {
				cause = leaseErr
			} else if !closed {
				// The pod is replaced below if its node is fine (the
				// source decides, after WorkerGone): work only this node
				// can hold waits for it meanwhile.
				cause = cluster.Restarting(cause)
			}
			r.lost(w.node, cause)
		}
		// An ended pod is kept by nobody. In the background: this may run
		// in the client's OnLost, whose reader should not wait for API
		// calls (worker.Client.Close itself may be called there).
		r.mu.Lock()
		if !r.closed {
			r.bg.Go(func() {
				r.deleteWorkers([]*podWorker{w})
				// The pod is gone; its node may serve again (a pod deleted
				// or evicted on a healthy node), as the source decides.
				if r.gone != nil {
					r.gone(w.node)
				}
			})
		}
		r.mu.Unlock()
	})
}

// NodeUp records a node; CPU nodes up to CPUPool.Min start their pod now.
func (r *Runner) NodeUp(ctx context.Context, n cluster.Node) error {
	r.mu.Lock()
	r.nodes[n.Name] = n
	eager := n.Resources[backend.TPU] == 0 && len(r.cpuPods) < r.cfg.CPUPool.Min && !r.closed
	if eager {
		r.cpuPodLocked(n.Name) // started in the background; errors surface at first use
	}
	r.mu.Unlock()
	return nil
}

// NodeDown deletes the node's CPU pod, in the background (it does not
// block), and fails at once the start of the node's pods still starting
// (a reservation's pod pinned to a deleted node would otherwise wait for
// Worker.StartTimeout).
func (r *Runner) NodeDown(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.nodes, name)
	why := "node " + name + " was lost while its worker pod started"
	for _, workers := range r.claims {
		for _, w := range workers {
			if w.node == name {
				r.failStartLocked(w, why)
			}
		}
	}
	w := r.cpuPods[name]
	delete(r.cpuPods, name)
	if w == nil || r.closed {
		return // Close deletes it
	}
	r.failStartLocked(w, why)
	w.released = true
	r.bg.Go(func() { r.deleteWorkers([]*podWorker{w}) })
}

// failStart fails w's start with why, if it is still starting
// (waitRunning and the dial loop look).
func (r *Runner) failStart(w *podWorker, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failStartLocked(w, why)
}

// failStartLocked is failStart with r.mu held.
func (r *Runner) failStartLocked(w *podWorker, why string) {
	select {
	case <-w.ready:
		return // started, or failed already
	default:
	}
	if w.startFail == "" {
		w.startFail = why
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// startFailed is why w's start failed at once, or "".
func (r *Runner) startFailed(w *podWorker) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.startFail
}

// cpuPodLocked returns the node's CPU pod, starting it if needed. r.mu
// is held.
func (r *Runner) cpuPodLocked(node string) *podWorker {
	if w := r.cpuPods[node]; w != nil {
		return w
	}
	w := r.newWorkerLocked(dnsName("goray", r.pt.cluster, "node", node, randomSuffix()[:5]), node)
	w.idleSince = time.Now()
	r.cpuPods[node] = w
	pod := r.pt.pod(podSpec{name: w.name, node: r.kubeNodeLocked(node, nil), tpuHost: r.nodes[node].TPU != nil})
	w.kueueSolo = r.cfg.Kueue.LocalQueue != ""
	r.bg.Go(func() { r.launch(w, pod) })
	return w
}

// kubeNodeLocked is the Kubernetes node of a runtime node (r.mu held):
// handle, the source's handle of the node in a claim (a replaced TPU host
// keeps its runtime name on a new node), else the handle NodeUp recorded,
// else the runtime name.
func (r *Runner) kubeNodeLocked(node string, handle any) string {
	if k, ok := handle.(kubeNodeHandle); ok {
		return string(k)
	}
	if k, ok := r.nodes[node].Handle.(kubeNodeHandle); ok {
		return string(k)
	}
	return node
}

func (r *Runner) newWorkerLocked(name, node string) *podWorker {
	w := &podWorker{name: name, node: node, ready: make(chan struct{}), changed: make(chan struct{}, 1)}
	r.byPod[name] = w
	return w
}

// launch creates w's pod, waits for it to run and dials its worker.
func (r *Runner) launch(w *podWorker, pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.Worker.StartTimeout)
	defer cancel()
	if w.kueueSolo {
		// The LocalQueue mode: the pod is admitted by Kueue too.
		w.err = r.kueueSoloPod(ctx, pod)
	}
	if w.err == nil {
		w.client, w.err = r.startPod(ctx, w, pod, nil, nil)
	}
	r.mu.Lock()
	if w.err != nil && r.cpuPods[w.node] == w {
		delete(r.cpuPods, w.node) // the next work tries again
	}
	if w.err == nil && w.released { // deleted while it started
		w.client.Close()
		w.client, w.err = nil, backend.Errorf(backend.Unavailable, "start worker pod "+w.name, "the pod was deleted while it started")
	}
	r.mu.Unlock()
	close(w.ready)
}

// adoptPod makes w's pod, one of this handle's capacity pods running the
// worker in waiting, a worker pod of a reservation: it takes the worker
// pod's labels (and loses the capacity label, so that neither this
// driver nor another takes it for capacity any more) while the driver
// connects, and gets the host's env in the handshake (ClientOptions.Env),
// listed in its AnnotationWorkerEnv for kubectl.
func (r *Runner) adoptPod(ctx context.Context, w *podWorker, lbl map[string]string, env map[string]string) (*worker.Client, error) {
	patch := map[string]any{}
	for k, v := range lbl {
		patch[k] = v
	}
	patch[labelCapacity] = nil
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		lines = append(lines, k+"="+env[k])
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      patch,
		"annotations": map[string]string{AnnotationWorkerEnv: strings.Join(lines, "\n")},
	}})
	if err != nil {
		return nil, backend.Errorf(backend.Internal, "adopt capacity pod "+w.name, "%w", err)
	}
	// The labels change once the pod runs, while its worker starts: not
	// in the way of the node's status writes, nor after the connection.
	patched := make(chan error, 1)
	c, err := r.startPod(ctx, w, nil, env, func() {
		go func() {
			_, err := r.client.CoreV1().Pods(r.cfg.Namespace).Patch(ctx, w.name, types.MergePatchType, body, metav1.PatchOptions{})
			patched <- err
		}()
	})
	if err != nil {
		return nil, err // the patch, if started, fails or is undone with the pod
	}
	if err := <-patched; err != nil {
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("%w (the driver's role needs patch on pods: apply backend/kubernetes/deploy/rbac.yaml, or set Provision.Placeholders)", err)
		}
		c.Close()
		r.deleteWorkers([]*podWorker{w})
		return nil, backend.Wrap(apiCode(err), "adopt capacity pod "+r.cfg.Namespace+"/"+w.name+" as a worker pod", err)
	}
	return c, nil
}

// startPod creates pod (nil: w's pod exists, a capacity pod adopted),
// waits for it to run, calls running (if set) and dials its worker, with
// env in the handshake.
func (r *Runner) startPod(ctx context.Context, w *podWorker, pod *corev1.Pod, env map[string]string, running func()) (*worker.Client, error) {
	op := "start worker pod " + r.cfg.Namespace + "/" + w.name
	if pod != nil {
		if _, err := r.client.CoreV1().Pods(r.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, backend.Wrap(apiCode(err), op, err)
		}
		r.created.Add(1)
	}
	ip, err := r.waitRunning(ctx, w)
	if err != nil {
		r.deleteWorkers([]*podWorker{w})
		if backend.CodeOf(err) == backend.FailedPrecondition {
			return nil, err // a gate that will not lift: not worth a retry
		}
		if ctx.Err() != nil {
			return nil, backend.Errorf(backend.Unavailable, op, "not running within %v (is the node short of google.com/tpu, or the image slow to pull?): %w", r.cfg.Worker.StartTimeout, err)
		}
		return nil, backend.Errorf(backend.Unavailable, op, "%w", err)
	}
	if running != nil {
		running()
	}
	opts := r.copts
	opts.OnLost = func(err error) { r.connLost(w, err) }
	opts.Env = env
	addr := ip + ":" + strconv.Itoa(int(r.cfg.Worker.Port))
	var c *worker.Client
	// The container runs before the worker listens: dial until it answers
	// or ctx ends (wait.Backoff stops at its cap, so the loop is ours). A
	// refusal (token, version, code) is final. Every 10 ms for the first
	// seconds, as a worker usually listens 0.1-0.3 s after its pod runs
	// (a longer step is time the reservation waits for nothing), then
	// backing off to 250 ms for one that starts slowly (seconds of imports
	// on a TPU host).
	delay, fastUntil := dialStep, time.Now().Add(dialFast)
	for {
		c, err = worker.Dial(ctx, addr, &opts)
		if err == nil || backend.CodeOf(err) != backend.Unavailable {
			break
		}
		if p, gerr := r.pods.Pods(r.cfg.Namespace).Get(w.name); gerr == nil && podProblem(p) != "" {
			err = fmt.Errorf("%s; last dial: %w", podProblem(p), err)
			break
		}
		if why := r.startFailed(w); why != "" {
			err = fmt.Errorf("%s; last dial: %w", why, err)
			break
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			err = fmt.Errorf("no answer within the start timeout %v: %w", r.cfg.Worker.StartTimeout, err)
		case <-t.C:
			if time.Now().After(fastUntil) {
				delay = min(delay*3/2, 250*time.Millisecond)
			}
			continue
		}
		break
	}
	if err != nil {
		r.deleteWorkers([]*podWorker{w})
		return nil, backend.Wrap(backend.CodeOf(err), op+": connect to "+addr, err)
	}
	return c, nil
}

// kueueGate is the scheduling gate Kueue's pod webhook puts on the pods
// it manages until their workload is admitted.
const kueueGate = "kueue.x-k8s.io/admission"

// kueueGated reports whether Kueue holds pod p back.
func kueueGated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == kueueGate })
}

// dialStep and dialFast: a worker is dialled every dialStep for dialFast
// after its pod runs, then with a backoff (startPod).
const (
	dialStep = 10 * time.Millisecond
	dialFast = 3 * time.Second
)

// waitRunning waits, on the pod watch, until w's pod runs, and returns
// its IP.
func (r *Runner) waitRunning(ctx context.Context, w *podWorker) (string, error) {
	// A slow tick backs the watch up, in case an update is coalesced.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if why := r.startFailed(w); why != "" {
			return "", errors.New(why)
		}
		if p, err := r.pods.Pods(r.cfg.Namespace).Get(w.name); err == nil {
			if why := podProblem(p); why != "" {
				return "", errors.New(why)
			}
			if kueueGated(p) && r.cfg.Kueue.LocalQueue == "" {
				return "", backend.Errorf(backend.FailedPrecondition, "start worker pod "+r.cfg.Namespace+"/"+w.name,
					"the pod is held by the scheduling gate %s: Kueue manages the pods of namespace %s (its manageJobsWithoutQueueName with the pod integration on) and lets them run only once a workload of a LocalQueue admits them, which goray asks for only when Config.Kueue.LocalQueue names a LocalQueue: name one of the namespace's LocalQueues there, or run the driver in a namespace Kueue does not manage (leave it out of Kueue's managedJobsNamespaceSelector)",
					kueueGate, r.cfg.Namespace)
			}
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				return p.Status.PodIP, nil
			}
			if p.Spec.NodeName == "" && w.makeRoom != "" {
				r.deleteCapacityOn(ctx, w.makeRoom)
			}
		}
		select {
		case <-w.changed:
		case <-tick.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// deleteCapacityOn deletes this handle's capacity pods on node, which the
// scheduler bound there after the claim looked (Source.ClaimSlices): they
// hold the google.com/tpu a new worker pod of the claim waits for, and do
// not give way (their PriorityClass never preempts and is not below the
// workers'). Adopted ones are workers already.
func (r *Runner) deleteCapacityOn(ctx context.Context, node string) {
	sel, err := labels.Parse(labelCapacity)
	if err != nil {
		return
	}
	pods, _ := r.pods.Pods(r.cfg.Namespace).List(sel)
	for _, p := range pods {
		r.mu.Lock()
		adopted := r.byPod[p.Name] != nil
		r.mu.Unlock()
		if p.Spec.NodeName != node || adopted || p.DeletionTimestamp != nil {
			continue
		}
		err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err == nil {
			r.log.Info("kubernetes: deleted a capacity pod bound after the claim to make room for a worker pod", "pod", p.Name, "node", node)
		}
	}
}

// wait returns the connected worker, or why it did not start.
func (w *podWorker) wait(ctx context.Context) (*worker.Client, error) {
	select {
	case <-w.ready:
		return w.client, w.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// HostNames returns the DNS name of each host's worker pod of claim c in
// the handle's headless Service, <hostname>.<service>.<namespace>.svc
// (cluster.HostNamer): the runtime derives the reservation's env (the
// TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES and MEGASCALE coordinator
// every bundle, task and pod sees) from these names, so the env a task
// reads from ray.Runtime equals its pod's process env. The names resolve
// as soon as the pods exist.
//
// A host where one of this handle's capacity pods runs the worker in
// waiting (ProvisionConfig.Placeholders false), which the source kept
// when it claimed the slice (Source.ClaimSlices), is named by that pod's
// hostname: the pod becomes the host's worker pod (Reserved).
func (r *Runner) HostNames(c cluster.Claim) [][]string {
	hostnames := podHostnames(c)
	adopt := r.adopted(c)
	for i := range hostnames {
		for j, h := range hostnames[i] {
			if p := adopt[c.Hosts[i][j]]; p != "" {
				h = p // a capacity pod's hostname is its name
			}
			hostnames[i][j] = h + "." + r.pt.service + "." + r.cfg.Namespace + ".svc"
		}
	}
	return hostnames
}

// podHostnames returns the pod hostname of each host of claim c,
// r<reservation>-s<slice>-w<worker>; the claim ID is unique in the
// handle, and so are the names in its Service.
func podHostnames(c cluster.Claim) [][]string {
	prefix := "r" + strings.TrimPrefix(c.ID, "pg-")
	out := make([][]string, len(c.Hosts))
	for i, hosts := range c.Hosts {
		for j := range hosts {
			out[i] = append(out[i], dnsName(fmt.Sprintf("%s-s%d-w%d", prefix, i, j)))
		}
	}
	return out
}

// adopted returns the capacity pods that become c's worker pods, by
// host (a sub-slice's hosts take none).
func (r *Runner) adopted(c cluster.Claim) map[string]string {
	if r.adoptions == nil || c.Subslice {
		return nil
	}
	return r.adoptions(c.ID)
}

// ChipsOutsideReservations implements cluster.ChipHolder: false. Work
// outside a slice reservation runs in its node's CPU pod, which requests
// no google.com/tpu. So the runtime places TPU work outside reservations
// (ray.Resources{TPU: 1}, serve's ChipsPerReplica) only on hosts it has
// claimed for it: the host's slice Lease taken in shared mode, as for a
// sub-slice, so that no other driver claims the slice meanwhile, and
// Reserved starting one pod on the host that requests all of its chips,
// as KubeRay's TPU worker pods do. Work on the host then runs in that pod,
// each piece with Ray's TPU_VISIBLE_CHIPS for the chips it holds; the pod
// is deleted and the Lease released once the host has been idle for
// cluster.Options.HostIdle.
func (r *Runner) ChipsOutsideReservations() bool { return false }

var _ cluster.ChipHolder = (*Runner)(nil)

// Reserved starts one pod per host of the claim with that host's env, or
// adopts the host's capacity pod that the source kept for the claim (a
// worker pod in waiting, named in HostNames), and returns once every
// worker is connected (cluster.ClaimRunner). On error every pod of the
// claim, created or adopted, is deleted.
func (r *Runner) Reserved(ctx context.Context, c cluster.Claim, env map[string]map[string]string) (err error) {
	defer func() { err = notReadyIsUnavailable(ctx, r.client, err) }()
	op := "start worker pods of reservation " + c.ID
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	hostnames := podHostnames(c)
	adopt := r.adopted(c)
	var workers []*podWorker
	var pods []*corev1.Pod // nil for an adopted capacity pod
	var labelsOf []map[string]string
	kubeNodes := make([][]string, len(c.Hosts)) // for the LocalQueue mode
	var sliceOf []int
	var podChips []int64
	for i, hosts := range c.Hosts {
		for j, host := range hosts {
			node := r.kubeNodeLocked(host, handleAt(c.Handles, i, j))
			kubeNodes[i] = append(kubeNodes[i], node)
			sliceOf = append(sliceOf, i)
			podChips = append(podChips, int64(r.nodes[host].Resources[backend.TPU]))
			lbl := map[string]string{LabelReservation: labelValue(c.ID), LabelSlice: labelValue(c.Slices[i]), LabelWorkerID: strconv.Itoa(j)}
			if name := adopt[host]; name != "" {
				workers = append(workers, r.newWorkerLocked(name, host))
				pods = append(pods, nil)
				lbl[LabelNode] = labelValue(node)
				labelsOf = append(labelsOf, lbl)
				continue
			}
			name := dnsName("goray", r.pt.cluster, hostnames[i][j])
			w := r.newWorkerLocked(name, host)
			w.makeRoom = node
			workers = append(workers, w)
			chips := int(r.nodes[host].Resources[backend.TPU])
			pods = append(pods, r.pt.pod(podSpec{
				name: name, node: node, chips: chips, hostname: hostnames[i][j], labels: lbl, env: env[host],
			}))
			labelsOf = append(labelsOf, nil)
		}
	}
	r.claims[c.ID] = workers
	r.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.runCtx, cancel)()
	exists := make([]bool, len(workers))
	if r.cfg.Kueue.LocalQueue != "" {
		// The LocalQueue mode: every new pod of the reservation is made, as
		// one Kueue pod group, and admitted whole before any starts. An
		// adopted capacity pod was admitted with its own group already.
		var nw []*podWorker
		var np []*corev1.Pod
		var ns []int
		var nchips int64
		for i, p := range pods {
			if p != nil {
				nw, np, ns = append(nw, workers[i]), append(np, p), append(ns, sliceOf[i])
				nchips += podChips[i]
			}
		}
		if len(np) > 0 {
			err := r.queueReserved(ctx, op, c, kubeNodes, nchips, nw, np, ns)
			if err != nil {
				r.Released(c)
				return err
			}
		}
		for i := range exists {
			exists[i] = pods[i] != nil
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, w := range workers {
		g.Go(func() error {
			sctx, cancel := context.WithTimeout(gctx, r.cfg.Worker.StartTimeout)
			defer cancel()
			switch {
			case exists[i]:
				w.client, w.err = r.startPod(sctx, w, nil, nil, nil)
			case pods[i] == nil:
				w.client, w.err = r.adoptPod(sctx, w, labelsOf[i], env[w.node])
			default:
				w.client, w.err = r.startPod(sctx, w, pods[i], nil, nil)
			}
			close(w.ready)
			return w.err
		})
	}
	if err := g.Wait(); err != nil {
		r.Released(c)
		return backend.Wrap(backend.CodeOf(err), op, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claims[c.ID] == nil { // released or closed meanwhile
		return backend.Errorf(backend.Unavailable, op, "the reservation ended while its pods started")
	}
	for _, w := range workers {
		w.claim = c.ID
		r.reserved[w.node] = w
	}
	return nil
}

// Released deletes the reservation's pods (cluster.ClaimRunner).
func (r *Runner) Released(c cluster.Claim) {
	if r.dropAdoptions != nil && !c.Subslice {
		r.dropAdoptions(c.ID) // deleted below with the others; not under r.mu (s.mu is taken after it elsewhere)
	}
	r.mu.Lock()
	workers := r.claims[c.ID]
	delete(r.claims, c.ID)
	for _, w := range workers {
		w.released = true
		if r.reserved[w.node] == w {
			delete(r.reserved, w.node)
		}
	}
	r.mu.Unlock()
	groups := r.capacityGroups(workers)
	r.deleteWorkers(workers)
	if workers != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r.deleteKueueWorkload(ctx, r.kueueGroupName(c.ID))
		for _, g := range groups {
			r.deleteKueueWorkload(ctx, g)
		}
	}
}

// deleteWorkers closes the workers' connections and deletes their pods at
// once, retrying API errors; it runs to its end.
func (r *Runner) deleteWorkers(workers []*podWorker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range workers {
		r.mu.Lock()
		w.released = true
		delete(r.byPod, w.name)
		r.mu.Unlock()
		// The hosts of a slice are deleted together, not one API round trip
		// after another.
		wg.Go(func() { r.deleteWorker(ctx, w) })
	}
}

// deleteWorker closes one worker's connection and deletes its pod,
// retrying API errors with backoff.
func (r *Runner) deleteWorker(ctx context.Context, w *podWorker) {
	select {
	case <-w.ready:
		if w.client != nil {
			w.client.Close()
		}
	default:
	}
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 8, Cap: 2 * time.Second},
		func(ctx context.Context) (bool, error) {
			err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, w.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err == nil || apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, nil
		})
	if err != nil {
		r.log.Warn("delete worker pod: retrying until the API server answers", "pod", w.name, "err", err)
		r.deleteInBackground(w.name)
	}
	if w.kueueSolo {
		r.deleteKueueWorkload(ctx, w.name)
	}
}

// deleteInBackground deletes a released worker pod whose deletion failed
// (the API server away for longer than deleteWorker retries) once the API
// server answers, trying every second until Close (which deletes every
// pod of the handle): left in place, the pod would keep its host's chips
// from the next reservation of the slice.
func (r *Runner) deleteInBackground(pod string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.bg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-r.runCtx.Done():
				return
			case <-t.C:
			}
			err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(r.runCtx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			if err == nil || apierrors.IsNotFound(err) {
				r.log.Info("deleted released worker pod after the API server answered again", "pod", pod)
				return
			}
		}
	})
}

// Close deletes every pod, the Service and the Secret of the cluster
// handle and stops watching (cluster.Runner).
func (r *Runner) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var all []*podWorker
	for _, w := range r.byPod {
		w.released = true
		all = append(all, w)
	}
	var groups []string // the LocalQueue mode's pod groups
	for id, workers := range r.claims {
		groups = append(groups, r.kueueGroupName(id))
		groups = append(groups, r.capacityGroupsLocked(workers)...)
	}
	for _, w := range r.byPod {
		if w.kueueSolo {
			groups = append(groups, w.name) // a CPU pod's
		}
	}
	r.claims = map[string][]*podWorker{}
	r.reserved, r.cpuPods = map[string]*podWorker{}, map[string]*podWorker{}
	r.mu.Unlock()
	r.cancelRun()
	r.bg.Wait() // pod starts in flight end (and clean up) first
	var wg sync.WaitGroup
	for _, w := range all {
		select {
		case <-w.ready:
			if w.client != nil {
				wg.Go(func() { w.client.Close() })
			}
		default:
		}
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Every pod of this handle in one call (DeleteCollection on the
	// cluster label), including those a start left behind.
	err := deletePods(ctx, r.client, r.cfg.Namespace, labels.Set{LabelCluster: r.pt.cluster}.String())
	for _, g := range groups {
		r.deleteKueueWorkload(ctx, g)
	}
	r.deleteShared()
	if r.stop != nil {
		r.stop()
		r.factory.Shutdown()
	}
	return err
}

// deleteShared deletes the Service and the Secret.
func (r *Runner) deleteShared() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := r.cfg.Namespace
	if err := r.client.CoreV1().Services(ns).Delete(ctx, r.pt.service, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("delete headless Service", "err", err)
	}
	r.deleteRenewedSecrets(ctx)
	if err := r.client.CoreV1().Secrets(ns).Delete(ctx, r.pt.secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("delete token Secret", "err", err)
	}
}

// workerFor returns the worker that runs the work info describes on its
// node (podForLocked), marked busy until the caller calls done (a CPU pod
// is not scaled down while busy).
func (r *Runner) workerFor(ctx context.Context, info *backend.RuntimeInfo) (_ *worker.Client, done func(), _ error) {
	if info == nil {
		info = &backend.RuntimeInfo{}
	}
	node := info.Node
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, backend.Errorf(backend.Unavailable, "run on node "+node, "%w", backend.ErrClosed)
	}
	w := r.podForLocked(info)
	w.busy++
	r.mu.Unlock()
	done = sync.OnceFunc(func() {
		r.mu.Lock()
		if w.busy--; w.busy == 0 {
			w.idleSince = time.Now()
		}
		r.mu.Unlock()
	})
	c, err := w.wait(ctx)
	if err != nil {
		done()
		code := backend.Unavailable
		if backend.CodeOf(err) == backend.FailedPrecondition {
			// A pod that can never start here (Kueue's gate without the
			// LocalQueue mode, a request the ClusterQueue cannot admit):
			// not a lost node to retry on.
			code = backend.FailedPrecondition
		}
		return nil, nil, backend.Wrap(code, "run on node "+node, err)
	}
	return c, done, nil
}

// podForLocked returns the pod that runs the work info describes on its
// node: the pod of the host's claim (r.reserved) for the work of that
// claim's slice reservation (in its placement group) and for work holding
// chips outside reservations (the claim of a host for them, whose pod
// holds the chips: ChipsOutsideReservations); the node's CPU pod, started
// if need be, for any other work. So work that is not a reservation's,
// such as CPU work on a reserved host, never runs in the reservation's
// pod: that pod carries the reservation's env and chips and lives exactly
// as long as the reservation, and its release (Released) deletes it while
// the runtime may already place new work on the host. r.mu is held.
func (r *Runner) podForLocked(info *backend.RuntimeInfo) *podWorker {
	if w := r.reserved[info.Node]; w != nil {
		g := info.Placement.Group
		if (g != 0 && w.claim == g.String()) || info.Resources[backend.TPU] > 0 {
			return w
		}
	}
	return r.cpuPodLocked(info.Node)
}

// scaleDown deletes, every period until Close, the CPU pods idle for
// CPUPool.IdleTimeout, longest idle first, while more than CPUPool.Min
// run. Work placed on their nodes later starts new ones (at first use),
// so the pool follows the demand between Min and Max.
func (r *Runner) scaleDown() {
	idle := r.cfg.CPUPool.IdleTimeout
	t := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return
		case now := <-t.C:
			r.scaleDownIdle(now)
		}
	}
}

// scaleDownIdle deletes the CPU pods idle for CPUPool.IdleTimeout at now,
// longest idle first, down to CPUPool.Min pods, and returns how many.
func (r *Runner) scaleDownIdle(now time.Time) int {
	r.mu.Lock()
	var idlePods []*podWorker
	for _, w := range r.cpuPods {
		select {
		case <-w.ready:
		default:
			continue // starting
		}
		if w.busy == 0 && w.client != nil && now.Sub(w.idleSince) >= r.cfg.CPUPool.IdleTimeout {
			idlePods = append(idlePods, w)
		}
	}
	slices.SortFunc(idlePods, func(a, b *podWorker) int { return a.idleSince.Compare(b.idleSince) })
	idlePods = idlePods[:min(len(idlePods), max(len(r.cpuPods)-r.cfg.CPUPool.Min, 0))]
	for _, w := range idlePods {
		delete(r.cpuPods, w.node)
		w.released = true
	}
	r.mu.Unlock()
	if len(idlePods) > 0 {
		r.log.Debug("CPU pool scaled down", "pods", len(idlePods))
		r.deleteWorkers(idlePods)
	}
	return len(idlePods)
}
