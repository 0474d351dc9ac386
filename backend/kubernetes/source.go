package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// Source is the node source of the Kubernetes backend (a cluster.NodeSource
// and cluster.SliceClaimer): it reports the cluster's TPU hosts, grouped into
// slices by their GKE labels, and its CPU nodes, from one shared Node
// informer (a watch, never a list per request), and claims slices with
// Leases (see Leases).
//
// A TPU slice (one GKE node pool) is reported once it is whole: as many
// hosts as its topology needs, each Ready, schedulable and offering its
// chips. From then on a host that is deleted, NotReady or cordoned is
// reported lost, and reported again when it is back; a replacement node
// (a new name in the same pool, of the slice's shape) takes the worker ID
// and the runtime name of the host it replaces, so the runtime sees that
// host come back and the slice whole again. Worker IDs are fixed when the
// slice is first reported.
type Source struct {
	client   kubernetes.Interface
	ns       string
	cluster  string // the cluster handle's ID (LabelCluster)
	cpuSel   labels.Selector
	cpuMax   int
	prov     ProvisionConfig
	kueue    KueueConfig // capacity pods as a Kueue pod group (kueue_capacity.go)
	leases   *Leases
	log      *slog.Logger
	resync   time.Duration
	nodes    cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
	queue    workqueue.TypedInterface[string]
	runOnce  sync.Once
	synced   chan struct{}
	mu       sync.Mutex
	sink     cluster.NodeSink
	slices   map[string]*sliceState
	cpu      map[string]bool // reported CPU nodes: alive
	killed   map[string]bool // nodes killed by Kill until Restore
	draining map[string]bool
	// The state above is keyed by Kubernetes node names; the runtime knows
	// nodes by their runtime names (LabelName, usually the same).
	rt, kube map[string]string // Kubernetes → runtime name, and back
	// kubeNames is kube (runtime → Kubernetes name) for the runner, read
	// without s.mu.
	kubeNames sync.Map

	// workerPod builds a worker pod from the runner's template
	// (NewFromParts sets it); without it capacity pods are placeholders.
	workerPod func(podSpec) *corev1.Pod
	// adoptions holds the capacity pods that become worker pods, by claim
	// ID, as a map from the runtime name of their host to the pod's name
	// (Source.adoptionsOf; read without s.mu): closing their provisioning
	// leaves them to the runner.
	adoptions sync.Map
}

// sliceState is what the source has reported of one slice.
type sliceState struct {
	plan  slicePlan
	hosts []string // node names by worker ID; nil until reported
	// names are the hosts' runtime names by worker ID, fixed when the
	// slice is first reported: a replacement node takes the runtime name
	// of the host it replaces, so the runtime sees that host come back
	// and the slice whole again.
	names   []string
	alive   map[string]bool // reported hosts that are alive
	problem string          // why the slice is not (or no longer) whole
	// claimLost holds the slice's hosts down after its Lease was lost,
	// until the claim is released.
	claimLost bool
}

const (
	poolIndex = "goray.dev/pool"
	keyPool   = "pool/"
	keyNode   = "node/"
)

// NewSource returns the node source for cfg on client. cluster is the
// cluster handle's ID (labels of the pods Kill deletes); leases claims
// the slices (nil: slices are not shared with other drivers).
func NewSource(client kubernetes.Interface, cfg Config, cluster ClusterID, leases *Leases) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sel := labels.Everything()
	if len(cfg.CPUPool.NodeSelector) > 0 {
		sel = labels.SelectorFromSet(cfg.CPUPool.NodeSelector)
	}
	s := &Source{
		client: client, ns: cfg.Namespace, cluster: string(cluster), cpuSel: sel, cpuMax: cfg.CPUPool.Max, prov: cfg.Provision, kueue: cfg.Kueue,
		leases: leases, log: cfg.Logger, resync: 10 * time.Minute,
		synced: make(chan struct{}),
		slices: map[string]*sliceState{}, cpu: map[string]bool{}, killed: map[string]bool{}, draining: map[string]bool{},
		rt: map[string]string{}, kube: map[string]string{},
	}
	s.factory = informers.NewSharedInformerFactory(client, s.resync)
	s.nodes = s.factory.Core().V1().Nodes().Informer()
	if err := s.nodes.AddIndexers(cache.Indexers{poolIndex: func(obj any) ([]string, error) {
		if n, ok := obj.(*corev1.Node); ok && poolOf(n) != "" {
			return []string{poolOf(n)}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, backend.Errorf(backend.Internal, "create node source", "index nodes by pool: %w", err)
	}
	s.queue = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "goray-nodes"})
	if leases != nil {
		leases.onLost = s.claimLost
		leases.cluster = string(cluster)
	}
	return s, nil
}

// keyOf returns the queue key of a node: its pool, or the node itself.
func keyOf(n *corev1.Node) string {
	if p := poolOf(n); p != "" {
		return keyPool + p
	}
	return keyNode + n.Name
}

func (s *Source) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		s.queue.Add(keyOf(n))
	}
}

// Run reports every current node to sink, then each change, until ctx
// ends. It is called once.
func (s *Source) Run(ctx context.Context, sink cluster.NodeSink) error {
	first := false
	s.runOnce.Do(func() { first = true })
	if !first {
		return backend.Errorf(backend.FailedPrecondition, "run node source", "Run was already called")
	}
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
	if _, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: s.enqueue,
		UpdateFunc: func(old, cur any) {
			s.enqueue(old)
			s.enqueue(cur)
		},
		DeleteFunc: s.enqueue,
	}); err != nil {
		return backend.Errorf(backend.Internal, "run node source", "watch nodes: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.nodes.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), s.nodes.HasSynced) {
		s.queue.ShutDown()
		wg.Wait()
		return ctx.Err()
	}
	// Report the nodes that exist now before Synced returns (the queue
	// holds them too; a second reconcile changes nothing).
	keys := map[string]bool{}
	for _, o := range s.nodes.GetStore().List() {
		keys[keyOf(o.(*corev1.Node))] = true
	}
	for _, k := range sortedKeys(keys) {
		s.reconcile(k)
	}
	close(s.synced)
	if s.leases != nil {
		wg.Go(func() { s.leases.renewLoop(ctx) })
	}
	wg.Go(func() {
		<-ctx.Done()
		s.queue.ShutDown()
	})
	for {
		key, shutdown := s.queue.Get()
		if shutdown {
			break
		}
		s.reconcile(key)
		s.queue.Done(key)
	}
	wg.Wait()
	return nil
}

// Synced returns once Run has reported every node that existed when it
// started (cluster.Syncer), or with ctx's error.
func (s *Source) Synced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Source) reconcile(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(key) > len(keyPool) && key[:len(keyPool)] == keyPool:
		s.reconcileSlice(key[len(keyPool):])
	case len(key) > len(keyNode) && key[:len(keyNode)] == keyNode:
		s.reconcileCPU(key[len(keyNode):])
	}
}

// reconcileSlice brings what the sink knows of one slice in line with
// the informer's nodes. s.mu is held.
func (s *Source) reconcileSlice(pool string) {
	objs, _ := s.nodes.GetIndexer().ByIndex(poolIndex, pool)
	nodes := make([]*corev1.Node, 0, len(objs))
	for _, o := range objs {
		nodes = append(nodes, o.(*corev1.Node))
	}
	st := s.slices[pool]
	if st == nil {
		st = &sliceState{alive: map[string]bool{}}
		s.slices[pool] = st
	}
	if st.hosts == nil {
		plan, err := planSlice(pool, nodes)
		if err != nil {
			if st.problem != err.Error() {
				s.log.Info("TPU slice not whole yet", "slice", pool, "reason", err)
			}
			st.problem = err.Error()
			return
		}
		st.plan, st.problem = plan, ""
		for _, n := range plan.hosts {
			st.hosts = append(st.hosts, n.Name)
			st.names = append(st.names, runtimeName(n))
		}
	}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	// A node of the pool that is not one of the hosts, of the slice's
	// shape, replaces a host whose node is gone (GKE recreates a failed
	// TPU VM under a new name): the one labelled with that host's worker
	// ID if any, else the first in natural order.
	var spare []*corev1.Node
	for _, n := range nodes {
		if !slices.Contains(st.hosts, n.Name) && sameShape(n, st.plan) {
			spare = append(spare, n)
		}
	}
	slices.SortFunc(spare, func(a, b *corev1.Node) int { return naturalCompare(a.Name, b.Name) })
	for wid, name := range st.hosts {
		n := byName[name]
		if n == nil && len(spare) > 0 {
			if st.alive[name] {
				s.lost(name, fmt.Errorf("node %s of TPU slice %q was deleted", name, pool))
				delete(st.alive, name)
			}
			i := slices.IndexFunc(spare, func(n *corev1.Node) bool { return n.Labels[tpu.LabelWorkerID] == strconv.Itoa(wid) })
			i = max(i, 0)
			n = spare[i]
			spare = slices.Delete(spare, i, i+1)
			s.log.Info("TPU host replaced", "slice", pool, "worker", wid, "old", name, "new", n.Name, "runtimeName", st.names[wid])
			delete(s.rt, name)
			st.hosts[wid] = n.Name
			name = n.Name
		}
		why := ""
		switch {
		case n == nil:
			why = fmt.Sprintf("node %s of TPU slice %q was deleted", name, pool)
		case st.claimLost:
			why = fmt.Sprintf("the Lease of TPU slice %q was lost", pool)
		case s.killed[name]:
			why = "node " + name + " was killed"
		case tpuChips(n) != st.plan.shape.ChipsPerHost && st.plan.shape.ChipsPerHost != 0:
			why = fmt.Sprintf("node %s has %d allocatable %s, want %d", name, tpuChips(n), resourceTPU, st.plan.shape.ChipsPerHost)
		default:
			why = nodeUnusable(n)
		}
		switch {
		case why == "" && !st.alive[name]:
			st.alive[name] = true
			hn := hostNode(st.plan.shape, pool, wid, n)
			hn.Name = st.names[wid]
			s.added(hn)
		case why != "" && st.alive[name]:
			delete(st.alive, name)
			s.lost(name, errors.New(why))
		}
	}
}

// reconcileCPU brings what the sink knows of one CPU node in line with
// the informer. s.mu is held.
func (s *Source) reconcileCPU(name string) {
	obj, exists, _ := s.nodes.GetIndexer().GetByKey(name)
	var n *corev1.Node
	if exists {
		n = obj.(*corev1.Node)
	}
	alive, known := s.cpu[name]
	usable := n != nil && cpuEligible(n, s.cpuSel) && !s.killed[name]
	switch {
	case usable && !alive:
		if !known && s.cpuCount() >= s.cpuMax {
			return
		}
		s.cpu[name] = true
		s.added(cpuNode(n))
	case !usable && alive:
		s.cpu[name] = false
		why := "node " + name + " was deleted"
		switch {
		case s.killed[name]:
			why = "node " + name + " was killed"
		case n != nil:
			why = nodeUnusable(n)
			if why == "" {
				why = "node " + name + " no longer matches the CPU pool"
			}
		}
		s.lost(name, errors.New(why))
		// A slot is free: nodes past the cap get another look.
		for _, o := range s.nodes.GetStore().List() {
			if n := o.(*corev1.Node); !isTPUNode(n) && !s.cpu[n.Name] && n.Name != name {
				s.queue.Add(keyNode + n.Name)
			}
		}
	}
}

func (s *Source) cpuCount() int {
	c := 0
	for _, alive := range s.cpu {
		if alive {
			c++
		}
	}
	return c
}

// added reports a node (s.mu held).
func (s *Source) added(n cluster.Node) {
	k := kubeNode(n)
	if old, ok := s.rt[k]; ok && old != n.Name {
		delete(s.kube, old)
	}
	s.rt[k], s.kube[n.Name] = n.Name, k
	s.kubeNames.Store(n.Name, k)
	s.sink.NodeAdded(n)
}

// KubeNode returns the Kubernetes node that the runtime node named name
// runs on now (a replaced TPU host's runtime name maps to its new node),
// or name itself. (The runner learns the same from each node's Handle.)
func (s *Source) KubeNode(name string) string {
	if k, ok := s.kubeNames.Load(name); ok {
		return k.(string)
	}
	return name
}

// sameShape reports whether n can be a host of plan's slice: the same
// accelerator, topology and chips.
func sameShape(n *corev1.Node, plan slicePlan) bool {
	return len(plan.hosts) > 0 && n.Labels[tpu.LabelGKEAccelerator] == plan.hosts[0].Labels[tpu.LabelGKEAccelerator] &&
		n.Labels[tpu.LabelGKETopology] == plan.hosts[0].Labels[tpu.LabelGKETopology] &&
		(plan.shape.ChipsPerHost == 0 || tpuChips(n) == plan.shape.ChipsPerHost)
}

// lost reports the Kubernetes node name lost (s.mu held).
func (s *Source) lost(name string, cause error) {
	delete(s.draining, name)
	s.sink.NodeLost(s.runtimeOf(name), cause)
}

func (s *Source) runtimeOf(kube string) string {
	if n, ok := s.rt[kube]; ok {
		return n
	}
	return kube
}

func (s *Source) kubeOf(runtime string) string {
	if n, ok := s.kube[runtime]; ok {
		return n
	}
	return runtime
}

// Add is not supported: nodes come from the cluster (its node pools and
// their autoscaler), not from the driver.
func (s *Source) Add(ctx context.Context, n cluster.Node) error {
	return backend.Errorf(backend.Unimplemented, "add node "+n.Name, "the Kubernetes backend uses the cluster's nodes; add a node pool instead")
}

// Drain reports the node as draining: the runtime places no new work
// there and reports it lost once its work has ended.
func (s *Source) Drain(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kubeOf(name)
	if !s.knownLocked(k) {
		return backend.Errorf(backend.NotFound, "drain node "+name, "no such node in the cluster")
	}
	s.draining[k] = true
	s.sink.NodeDraining(name)
	return nil
}

// Kill ends a node abruptly, as a host failure does: it reports the node
// lost and deletes the cluster's worker pods on it. The node stays out
// of the cluster until Restore.
func (s *Source) Kill(ctx context.Context, name string) error {
	op := "kill node " + name
	s.mu.Lock()
	k := s.kubeOf(name)
	if !s.knownLocked(k) {
		s.mu.Unlock()
		return backend.Errorf(backend.NotFound, op, "no such node in the cluster")
	}
	s.killed[k] = true
	s.requeueLocked(k)
	s.mu.Unlock()
	err := deletePods(ctx, s.client, s.ns, labels.Set{LabelCluster: s.cluster, LabelNode: labelValue(k)}.String())
	if err != nil {
		return backend.Wrap(backend.CodeOf(err), op, err)
	}
	return nil
}

// WorkerGone tells the source that the worker pod of a node it reported
// was lost (deleted, evicted, ended) and has been deleted, while the node
// itself may be fine: the node is reported again if it is usable, so a
// lost pod does not take its host, and its slice, away for good. A node
// that is unusable (NotReady, deleted, killed) stays lost.
//
// The runner reports such a node lost as restarting (cluster.ErrRestarting),
// so work only it can hold waits for it; a node that is not reported again
// here is reported lost for good, which fails that work as Infeasible.
func (s *Source) WorkerGone(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kubeOf(name)
	for pool, st := range s.slices {
		if wid := slices.Index(st.hosts, k); wid >= 0 {
			if st.alive[k] {
				delete(st.alive, k) // the runtime has it lost already
				s.reconcileSlice(pool)
			}
			if cur := st.hosts[wid]; !st.alive[cur] {
				s.sink.NodeLost(st.names[wid], fmt.Errorf("the worker pod of %s was lost and its node cannot run a new one (%s)", name, s.unusable(cur)))
			}
			return
		}
	}
	if s.cpu[k] {
		s.cpu[k] = false
		s.reconcileCPU(k)
	}
	if !s.cpu[k] {
		s.sink.NodeLost(name, fmt.Errorf("the worker pod of %s was lost and its node cannot run a new one (%s)", name, s.unusable(k)))
	}
}

// unusable says why a Kubernetes node cannot run a worker pod. s.mu is
// held.
func (s *Source) unusable(name string) string {
	obj, exists, _ := s.nodes.GetIndexer().GetByKey(name)
	switch {
	case !exists:
		return "node " + name + " was deleted"
	case s.killed[name]:
		return "node " + name + " was killed"
	}
	if why := nodeUnusable(obj.(*corev1.Node)); why != "" {
		return why
	}
	return "node " + name + " is not usable for goray"
}

// Restore brings a killed node back (reported when it is usable).
func (s *Source) Restore(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kubeOf(name)
	if !s.killed[k] {
		if s.knownLocked(k) {
			return nil
		}
		return backend.Errorf(backend.NotFound, "restore node "+name, "no such node in the cluster")
	}
	delete(s.killed, k)
	s.requeueLocked(k)
	return nil
}

// requeueLocked reconciles name's slice or CPU node now (s.mu held),
// so that Kill and Restore report before they return.
func (s *Source) requeueLocked(name string) {
	for pool, st := range s.slices {
		if slices.Contains(st.hosts, name) {
			s.reconcileSlice(pool)
			return
		}
	}
	s.reconcileCPU(name)
}

func (s *Source) knownLocked(name string) bool {
	if _, ok := s.cpu[name]; ok {
		return true
	}
	for _, st := range s.slices {
		if slices.Contains(st.hosts, name) {
			return true
		}
	}
	return false
}

// ClaimSlices claims the slices of c with Leases (cluster.SliceClaimer).
// Slices that another driver's capacity pods sit on (or wait for) are
// held by that driver; once the claim holds, this driver's own capacity
// pods on the claimed hosts become the claim's worker pods (worker pods
// in waiting) or are deleted so that new worker pods replace them
// (placeholders; see Provision and replaceCapacity).
func (s *Source) ClaimSlices(ctx context.Context, c cluster.Claim) (err error) {
	defer func() { err = notReadyIsUnavailable(ctx, s.client, err) }()
	if err := s.capacityCheck(ctx, c); err != nil {
		return err
	}
	switch {
	case s.leases == nil:
	case c.Subslice:
		err = s.leases.ClaimSubslice(ctx, c.ID, c.Slices[0])
	default:
		err = s.leases.ClaimQueued(ctx, c.ID, s.shapeOf(c.Slices[0]), c.Slices)
	}
	if err != nil {
		return err
	}
	if err := s.replaceCapacity(ctx, c); err != nil {
		if s.leases != nil && !c.Subslice {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = s.leases.Release(rctx, c.Slices)
			cancel()
		}
		return err
	}
	return nil
}

// shapeOf is the shape key of a slice (generation/topology/chips), which
// every driver computes alike from the node labels.
func (s *Source) shapeOf(slice string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.slices[slice]; st != nil {
		sh := st.plan.shape
		return fmt.Sprintf("%s/%s/%d", sh.Generation, sh.Topology, sh.ChipsPerHost)
	}
	return slice
}

// ReleaseSlices deletes the Leases of c (cluster.SliceClaimer). Slices whose
// Lease was lost meanwhile come back once they are whole.
func (s *Source) ReleaseSlices(ctx context.Context, c cluster.Claim) error {
	// The claim's adopted capacity pods, deleted with the Leases released
	// if the runner has not taken them (the claim ended before its workers
	// started): nobody else would.
	var adoptErr error
	var wg sync.WaitGroup
	if names := s.dropAdoptions(c.ID); len(names) > 0 {
		wg.Go(func() { adoptErr = deletePodsNamed(ctx, s.client, s.ns, names) })
	}
	var err error
	switch {
	case s.leases == nil:
	case c.Subslice:
		err = s.leases.ReleaseSubslice(ctx, c.ID, c.Slices[0])
	default:
		err = s.leases.Release(ctx, c.Slices)
	}
	s.mu.Lock()
	for _, name := range c.Slices {
		if st := s.slices[name]; st != nil && st.claimLost {
			st.claimLost = false
			s.queue.Add(keyPool + name)
		}
	}
	s.mu.Unlock()
	wg.Wait()
	return errors.Join(err, adoptErr)
}

// PodLost is told by the runner that the worker pod of runtime node
// name was lost with cause. When the node is a host of a slice whose
// Lease this driver has not renewed for long enough that another driver
// may have taken it over (an API server it cannot reach), the slice is
// taken for lost (Leases.LostOnPodLoss) and the error saying so returned;
// else nil, and the pod's loss is only that.
func (s *Source) PodLost(name string, cause error) error {
	if s.leases == nil {
		return nil
	}
	s.mu.Lock()
	k := s.kubeOf(name)
	slice := ""
	for pool, st := range s.slices {
		if slices.Contains(st.hosts, k) {
			slice = pool
			break
		}
	}
	s.mu.Unlock()
	if slice == "" {
		return nil
	}
	return s.leases.LostOnPodLoss(slice, cause)
}

// claimLost is called by the Leases when another driver took (or
// someone deleted) the Lease of a slice this driver holds: its hosts are
// reported lost, so the work there fails and is retried elsewhere.
func (s *Source) claimLost(slice string, cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.slices[slice]
	if st == nil || s.sink == nil {
		return
	}
	st.claimLost = true
	for _, h := range st.hosts {
		if st.alive[h] {
			delete(st.alive, h)
			s.lost(h, cause)
		}
	}
}

// deletePods deletes the pods matching selector at once (no grace): one
// DeleteCollection call, retried on transient API errors. An identity
// that may not delete collections (a Role from before the deletecollection
// verb) falls back to listing the pods and deleting them one by one.
// apiBackoff retries transient API errors of one call.
var apiBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 2 * time.Second}

func deletePods(ctx context.Context, client kubernetes.Interface, ns, selector string) error {
	pods := client.CoreV1().Pods(ns)
	del := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	err := retry.OnError(apiBackoff, retriable, func() error {
		return pods.DeleteCollection(ctx, del, metav1.ListOptions{LabelSelector: selector})
	})
	switch {
	case err == nil:
		return nil
	case !apierrors.IsForbidden(err):
		return backend.Wrap(apiCode(err), "delete pods "+selector, err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return backend.Wrap(apiCode(err), "list pods "+selector, err)
	}
	var errs []error
	for _, p := range list.Items {
		err := pods.Delete(ctx, p.Name, del)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return backend.Wrap(backend.Unavailable, "delete pods", err)
	}
	return nil
}

// dropAdoptions forgets the capacity pods adopted for claim ID and
// returns their names: the runner has deleted them (Runner.Released), or
// ReleaseSlices does.
func (s *Source) dropAdoptions(claimID string) []string {
	a, ok := s.adoptions.LoadAndDelete(claimID)
	if !ok {
		return nil
	}
	return slices.Collect(maps.Values(a.(map[string]string)))
}

// adoptedPods returns the names of every capacity pod adopted by a claim
// not yet released.
func (s *Source) adoptedPods() map[string]bool {
	out := map[string]bool{}
	s.adoptions.Range(func(_, a any) bool {
		for _, name := range a.(map[string]string) {
			out[name] = true
		}
		return true
	})
	return out
}
