//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// agentConfig is what the node agent needs from the control plane.
type agentConfig struct {
	runDir  string
	images  imageTable
	ips     *ipAllocator
	net     *podNetwork // NetworkIsolated only
	apiHost string      // for KUBERNETES_SERVICE_HOST/PORT
	apiPort string
	caPEM   []byte // the apiserver's CA, for service-account token mounts
	logf    func(format string, args ...any)
}

func (cp *ControlPlane) agentConfig() agentConfig {
	return agentConfig{
		runDir:  cp.runDir,
		images:  newImageTable(cp.opts.Images),
		ips:     cp.ips,
		net:     cp.net,
		apiHost: cp.HostIP(),
		apiPort: strconv.Itoa(cp.apiPort),
		caPEM:   cp.caPEM,
		logf:    cp.tb.Logf,
	}
}

// nodeAgent is the harness's kubelet: one agent serves every agent node of
// a control plane. It watches all pods through one shared informer, runs
// each pod bound to one of its nodes as local processes (a podRun), and
// kills them when the pod or its node is deleted. See the package doc for
// why this is not virtual-kubelet.
type nodeAgent struct {
	client  kubernetes.Interface
	cfg     agentConfig
	factory informers.SharedInformerFactory
	cancel  context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup

	mu       sync.Mutex
	nodes    map[string]agentNode  // agent nodes by name
	lost     map[string]bool       // deleted agent nodes
	runs     map[types.UID]*podRun // pods started on agent nodes, until deleted
	latest   map[string]*podRun    // namespace/name → most recent run (kept for logs)
	deleting map[types.UID]bool    // pods the agent is finalizing without a run
	stopped  bool
}

type agentNode struct {
	uid types.UID // "" while the create call is in flight
	ip  string
}

func newNodeAgent(cfg *rest.Config, ac agentConfig) (*nodeAgent, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("node agent client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &nodeAgent{
		client:   client,
		cfg:      ac,
		factory:  informers.NewSharedInformerFactory(client, 0),
		ctx:      ctx,
		cancel:   cancel,
		nodes:    make(map[string]agentNode),
		lost:     make(map[string]bool),
		runs:     make(map[types.UID]*podRun),
		latest:   make(map[string]*podRun),
		deleting: make(map[types.UID]bool),
	}, nil
}

func (a *nodeAgent) start(ctx context.Context) error {
	pods := a.factory.Core().V1().Pods().Informer()
	nodes := a.factory.Core().V1().Nodes().Informer()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.syncPod(obj) },
		UpdateFunc: func(_, obj any) { a.syncPod(obj) },
		DeleteFunc: a.podDeleted,
	})
	if err != nil {
		return err
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: a.nodeDeleted}); err != nil {
		return err
	}
	a.factory.Start(a.ctx.Done())
	for typ, ok := range a.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("node agent: %v informer did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
}

// expectNode marks name as an agent node before it is created, so that a
// pod bound the instant it exists is not missed.
func (a *nodeAgent) expectNode(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes[name] = agentNode{}
	delete(a.lost, name)
}

// adoptNode records the UID and IP of a created agent node.
func (a *nodeAgent) adoptNode(n *corev1.Node) {
	ip := ""
	for _, ad := range n.Status.Addresses {
		if ad.Type == corev1.NodeInternalIP {
			ip = ad.Address
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes[n.Name] = agentNode{uid: n.UID, ip: ip}
}

// forgetNode drops an agent node; uid "" matches any.
func (a *nodeAgent) forgetNode(name string, uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.nodes[name]
	if !ok || (uid != "" && n.uid != "" && n.uid != uid) {
		return false
	}
	delete(a.nodes, name)
	return true
}

func (a *nodeAgent) nodeDeleted(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if n, ok = tomb.Obj.(*corev1.Node); !ok {
			return
		}
	}
	if !a.forgetNode(n.Name, n.UID) {
		return
	}
	a.mu.Lock()
	a.lost[n.Name] = true
	var victims []*podRun
	for _, r := range a.runs {
		if r.node == n.Name {
			victims = append(victims, r)
		}
	}
	a.mu.Unlock()
	// As the pod garbage collector of kube-controller-manager would: the
	// pods of a deleted node are killed, marked Failed and deleted.
	for _, r := range victims {
		r.requestStop(stopNodeLost, 0)
	}
}

func (a *nodeAgent) syncPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	run := a.runs[pod.UID]
	node, ours := a.nodes[pod.Spec.NodeName]
	switch {
	case pod.DeletionTimestamp != nil && run != nil:
		grace := 30 * time.Second
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		run.requestStop(stopTerminating, grace)
	case run != nil:
		// Already running; the agent's own status writes come back here.
	case a.lost[pod.Spec.NodeName] && !ours:
		a.finalizeWithoutRun(pod, true)
	case !ours:
		// A kwok node, or no node the agent knows.
	case pod.DeletionTimestamp != nil:
		a.finalizeWithoutRun(pod, false)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		// Finished before the agent saw it (never happens to a pod the
		// agent started: its run stays until the pod is deleted).
	default:
		hostIP := node.ip
		if hostIP == "" {
			hostIP = "127.0.0.1"
		}
		run = newPodRun(a, pod.DeepCopy(), hostIP)
		a.runs[pod.UID] = run
		a.latest[pod.Namespace+"/"+pod.Name] = run
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			run.loop()
		}()
	}
}

// finalizeWithoutRun deletes a pod the agent never ran (deleted before it
// started, or bound to a node that is gone), once.
func (a *nodeAgent) finalizeWithoutRun(pod *corev1.Pod, nodeLost bool) {
	if a.deleting[pod.UID] {
		return
	}
	a.deleting[pod.UID] = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(a.ctx, 30*time.Second)
		defer cancel()
		if nodeLost && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			p := pod.DeepCopy()
			markNodeLost(&p.Status)
			_, _ = a.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		}
		a.forceDelete(ctx, pod.Namespace, pod.Name, pod.UID)
	}()
}

// forceDelete removes a pod whose processes are gone, as the kubelet does
// at the end of graceful termination.
func (a *nodeAgent) forceDelete(ctx context.Context, ns, name string, uid types.UID) {
	zero := int64(0)
	err := a.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && a.ctx.Err() == nil {
		a.cfg.logf("kubeharness: node agent: delete pod %s/%s: %v", ns, name, err)
	}
}

func (a *nodeAgent) podDeleted(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	a.mu.Lock()
	run := a.runs[pod.UID]
	delete(a.runs, pod.UID)
	delete(a.deleting, pod.UID)
	a.mu.Unlock()
	if run != nil {
		run.requestStop(stopPodGone, 0)
	}
}

// stop kills every pod process and stops the informers. No API calls: the
// apiserver is about to go away.
func (a *nodeAgent) stop() { a.kill() }

func (a *nodeAgent) kill() {
	a.mu.Lock()
	a.stopped = true
	runs := make([]*podRun, 0, len(a.runs))
	for _, r := range a.runs {
		runs = append(runs, r)
	}
	a.mu.Unlock()
	for _, r := range runs {
		r.requestStop(stopTeardown, 0)
	}
	a.cancel()
	a.wg.Wait()
	a.factory.Shutdown()
}

// run returns the latest run of namespace/name.
func (a *nodeAgent) run(namespace, name string) (*podRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.latest[namespace+"/"+name]
	if r == nil {
		var known []string
		for k := range a.latest {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("node agent ran no pod %s/%s (it ran %d pods: %v)", namespace, name, len(known), known)
	}
	return r, nil
}

// ipAllocator hands out unique loopback addresses (Linux accepts binds on
// any 127.x.y.z without configuration). Each control plane takes a
// 127.B.0.0/16 with B in [100, 250) that no other live control plane on
// the machine holds: B is tried in a random order, and held with an
// exclusive flock(2) on a lock file per block (lockLoopbackBlock), which
// the kernel drops when the holder closes it or dies. Within the block
// every node and pod gets its own address and none is reused.
type ipAllocator struct {
	mu   sync.Mutex
	base int
	n    int
	lock *os.File // the block's lock, nil if none could be taken
}

const (
	firstLoopbackBlock = 100
	loopbackBlocks     = 150
)

func newIPAllocator() *ipAllocator {
	for _, i := range rand.Perm(loopbackBlocks) {
		b := firstLoopbackBlock + i
		if f := lockLoopbackBlock(b); f != nil {
			return &ipAllocator{base: b, lock: f}
		}
	}
	// Every block held (150 live control planes), or no lock files: a
	// random block, as likely to be free as any.
	return &ipAllocator{base: firstLoopbackBlock + rand.IntN(loopbackBlocks)}
}

// lockLoopbackBlock takes the lock of block b without waiting, or returns
// nil if another process holds it or the lock file cannot be opened. The
// lock files (one per block, empty, at most loopbackBlocks of them) stay
// in the temporary folder: removing one could race with a process that
// just opened it.
func lockLoopbackBlock(b int) *os.File {
	dir := filepath.Join(os.TempDir(), "goray-kubeharness-loopback")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("127.%d.lock", b)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}

// release gives the block back to other control planes.
func (a *ipAllocator) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lock != nil {
		a.lock.Close() // drops the flock
		a.lock = nil
	}
}

func (a *ipAllocator) next() netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	i := a.n
	b := a.base + i/(254*256)
	return netip.AddrFrom4([4]byte{127, byte(b), byte(i / 254 % 256), byte(i%254 + 1)})
}
