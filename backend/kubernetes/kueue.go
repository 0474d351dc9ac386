package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// This file is the LocalQueue mode (Config.Kueue): a slice reservation's
// worker pods form one Kueue plain pod group (Kueue's "pod" integration)
// in the configured LocalQueue, which Kueue admits all at once against its
// ClusterQueue's quota. Kueue's objects are CRDs whose Go types live in a
// module the backend does not import, so they are read as JSON through
// the clientset's REST client (kueue.x-k8s.io/v1beta2).

// KueueConfig configures the LocalQueue mode.
type KueueConfig struct {
	// LocalQueue is the Kueue LocalQueue, in Config.Namespace, that admits
	// the driver's slice reservations. Each reservation's worker pods are
	// one pod group (labels kueue.x-k8s.io/queue-name and
	// kueue.x-k8s.io/pod-group-name, annotation
	// kueue.x-k8s.io/pod-group-total-count), gated by Kueue until the
	// group's Workload is admitted whole. A LocalQueue that does not exist
	// fails the first reservation with FailedPrecondition naming it; a
	// reservation needing more google.com/tpu than its ClusterQueue can
	// ever admit (nominal plus borrowing quota of the flavor of its
	// slices' nodes) fails at once with Infeasible; Kueue's preemption of
	// a running reservation fails its work with Unavailable at once.
	// Empty: goray does not ask Kueue for admission.
	LocalQueue string
	// PriorityClass, if set, is the Kueue WorkloadPriorityClass of the
	// reservations (label kueue.x-k8s.io/priority-class), which decides
	// who preempts whom in the ClusterQueue.
	PriorityClass string
}

func (k KueueConfig) validate(prov ProvisionConfig) []error {
	var errs []error
	for name, v := range map[string]string{"Kueue.LocalQueue": k.LocalQueue, "Kueue.PriorityClass": k.PriorityClass} {
		if v == "" {
			continue
		}
		for _, m := range validation.IsDNS1123Subdomain(v) {
			errs = append(errs, fmt.Errorf("%s %q: %s", name, v, m))
		}
	}
	if k.LocalQueue == "" && k.PriorityClass != "" {
		errs = append(errs, fmt.Errorf("Kueue.PriorityClass %q without Kueue.LocalQueue: name the LocalQueue the reservations are admitted by", k.PriorityClass))
	}
	if k.LocalQueue != "" && prov.Mode != ProvisionOff && prov.Placeholders {
		errs = append(errs, fmt.Errorf("Kueue.LocalQueue %q with Provision.Placeholders: in the LocalQueue mode the capacity pods are the reservation's worker pods in waiting (one Kueue pod group); leave Placeholders off", k.LocalQueue))
	}
	return errs
}

// Kueue's labels, annotations and scheduling gates (its pod integration).
const (
	labelKueueQueue         = "kueue.x-k8s.io/queue-name"
	labelKueueGroup         = "kueue.x-k8s.io/pod-group-name"
	labelKueuePriority      = "kueue.x-k8s.io/priority-class"
	annotationKueueCount    = "kueue.x-k8s.io/pod-group-total-count"
	annotationKueueRetry    = "kueue.x-k8s.io/retriable-in-group"
	kueueTopologyGate       = "kueue.x-k8s.io/topology"
	kueueTerminationTarget  = "TerminationTarget"
	kueueAPI                = "/apis/kueue.x-k8s.io/v1beta2"
	kueueWaitReportInterval = time.Second
)

// kueueObject is the part of Kueue's objects the backend reads.
type kueueObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		// LocalQueue
		ClusterQueue string `json:"clusterQueue"`
		// ClusterQueue
		CohortName              string               `json:"cohortName"`
		ResourceGroups          []kueueResourceGroup `json:"resourceGroups"`
		AdmissionChecksStrategy *struct {
			AdmissionChecks []struct {
				Name string `json:"name"`
			} `json:"admissionChecks"`
		} `json:"admissionChecksStrategy"`
		// AdmissionCheck
		ControllerName string `json:"controllerName"`
		// ResourceFlavor
		NodeLabels map[string]string `json:"nodeLabels"`
		// Workload
		QueueName string `json:"queueName"`
		Priority  *int32 `json:"priority"`
		Active    *bool  `json:"active"`
	} `json:"spec"`
	Status struct {
		Conditions       []metav1.Condition `json:"conditions"`
		PendingWorkloads int32              `json:"pendingWorkloads"`
		// Workload
		AdmissionChecks []struct {
			Name    string `json:"name"`
			State   string `json:"state"`
			Message string `json:"message"`
		} `json:"admissionChecks"`
	} `json:"status"`
}

// kueueResourceGroup is a ClusterQueue's quota of some resources, per
// flavor.
type kueueResourceGroup struct {
	CoveredResources []string `json:"coveredResources"`
	Flavors          []struct {
		Name      string          `json:"name"`
		Resources []kueueResource `json:"resources"`
	} `json:"flavors"`
}

type kueueResource struct {
	Name           string             `json:"name"`
	NominalQuota   resource.Quantity  `json:"nominalQuota"`
	BorrowingLimit *resource.Quantity `json:"borrowingLimit"`
	LendingLimit   *resource.Quantity `json:"lendingLimit"`
}

type kueueList struct {
	Items []kueueObject `json:"items"`
}

// kueueQueue is what the LocalQueue mode knows of the queue of a
// reservation: the LocalQueue, its ClusterQueue, and the ClusterQueue's
// flavors with google.com/tpu quota, in its order.
type kueueQueue struct {
	lq, cq  string
	flavors []kueueFlavor
	// provChecks are the ClusterQueue's admission checks whose controller
	// is Kueue's ProvisioningRequest one; checksErr, why they could not be
	// read.
	provChecks []string
	checksErr  error
	// covered are the resources the ClusterQueue has quota of.
	covered []string
}

// kueueProvisioningController is the controllerName of Kueue's
// ProvisioningRequest admission checks.
const kueueProvisioningController = "kueue.x-k8s.io/provisioning-request"

type kueueFlavor struct {
	name   string
	labels map[string]string // the ResourceFlavor's nodeLabels
	// max is the most google.com/tpu one workload can get in the flavor:
	// nominal quota plus what the ClusterQueue may borrow.
	max       int64
	unbounded bool // borrowing without a limit from a cohort of unknown size
}

// labelKeys are the node label keys the flavors select on, sorted.
func (q *kueueQueue) labelKeys() []string {
	var keys []string
	for _, f := range q.flavors {
		for k := range f.labels {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// flavorOf returns the flavors whose nodeLabels the node's labels match.
func (q *kueueQueue) flavorsOf(nodeLabels map[string]string) []kueueFlavor {
	var out []kueueFlavor
	for _, f := range q.flavors {
		ok := true
		for k, v := range f.labels {
			if nodeLabels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, f)
		}
	}
	return out
}

// kueueClient reads Kueue's objects for the LocalQueue lq of namespace
// ns (the runner's pod groups, the source's capacity groups).
type kueueClient struct {
	client kubernetes.Interface
	ns, lq string
}

// kueueRest returns the REST client for Kueue's API, or an error saying
// why there is none.
func (k kueueClient) kueueRest(op string) (rest.Interface, error) {
	d := k.client.Discovery()
	if d != nil {
		if rc := d.RESTClient(); rc != nil {
			if c, ok := rc.(*rest.RESTClient); !ok || c != nil {
				return rc, nil
			}
		}
	}
	return nil, backend.Errorf(backend.FailedPrecondition, op, "Kueue.LocalQueue %q needs a client of a real API server (Kueue's objects are CRDs the client-go fake does not serve)", k.lq)
}

func (k kueueClient) kueueGet(ctx context.Context, rc rest.Interface, path string, into any) error {
	raw, err := rc.Get().AbsPath(kueueAPI + path).Do(ctx).Raw()
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, into)
}

// kueueQueueOf reads the LocalQueue of the mode, its ClusterQueue and
// flavors.
func (k kueueClient) kueueQueueOf(ctx context.Context, op string) (*kueueQueue, error) {
	rc, err := k.kueueRest(op)
	if err != nil {
		return nil, err
	}
	ns, name := k.ns, k.lq
	var lq kueueObject
	if err := k.kueueGet(ctx, rc, "/namespaces/"+ns+"/localqueues/"+name, &lq); err != nil {
		if apierrors.IsNotFound(err) {
			var l kueueList
			if lerr := k.kueueGet(ctx, rc, "/namespaces/"+ns+"/localqueues", &l); apierrors.IsNotFound(lerr) {
				return nil, backend.Errorf(backend.FailedPrecondition, op, "Kueue.LocalQueue %q: the cluster does not serve Kueue's API (%s localqueues): is Kueue installed?", name, kueueAPI)
			} else if lerr == nil {
				var names []string
				for _, it := range l.Items {
					names = append(names, it.Metadata.Name)
				}
				return nil, backend.Errorf(backend.FailedPrecondition, op, "Kueue.LocalQueue %q: no LocalQueue %s/%s (the namespace's LocalQueues: %s); ask the cluster's admin for one, or name one of these", name, ns, name, listOrNone(names))
			}
			return nil, backend.Errorf(backend.FailedPrecondition, op, "Kueue.LocalQueue %q: no LocalQueue %s/%s; ask the cluster's admin for one", name, ns, name)
		}
		return nil, backend.Wrap(apiCode(err), op, fmt.Errorf("read LocalQueue %s/%s: %w%s", ns, name, err, kueueRBACHint(err)))
	}
	q := &kueueQueue{lq: name, cq: lq.Spec.ClusterQueue}
	var cq kueueObject
	if err := k.kueueGet(ctx, rc, "/clusterqueues/"+q.cq, &cq); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "LocalQueue %s/%s points at ClusterQueue %q, which does not exist; ask the cluster's admin", ns, name, q.cq)
		}
		return nil, backend.Wrap(apiCode(err), op, fmt.Errorf("read ClusterQueue %s of LocalQueue %s/%s: %w%s", q.cq, ns, name, err, kueueRBACHint(err)))
	}
	if st := cq.Spec.AdmissionChecksStrategy; st != nil {
		for _, c := range st.AdmissionChecks {
			var ac kueueObject
			if err := k.kueueGet(ctx, rc, "/admissionchecks/"+c.Name, &ac); err != nil {
				q.checksErr = fmt.Errorf("read AdmissionCheck %s of ClusterQueue %s: %w%s", c.Name, q.cq, err, kueueRBACHint(err))
				continue
			}
			if ac.Spec.ControllerName == kueueProvisioningController {
				q.provChecks = append(q.provChecks, c.Name)
			}
		}
	}
	// A cohort lends its members' unused quota: without a borrowing limit
	// a flavor can grow by what the cohort's other ClusterQueues lend.
	var cohort []kueueObject
	if cq.Spec.CohortName != "" {
		var l kueueList
		if err := k.kueueGet(ctx, rc, "/clusterqueues", &l); err == nil {
			for _, it := range l.Items {
				if it.Spec.CohortName == cq.Spec.CohortName && it.Metadata.Name != q.cq {
					cohort = append(cohort, it)
				}
			}
		}
	}
	for _, g := range cq.Spec.ResourceGroups {
		q.covered = append(q.covered, g.CoveredResources...)
		if !slices.Contains(g.CoveredResources, string(resourceTPU)) {
			continue
		}
		for _, f := range g.Flavors {
			kf := kueueFlavor{name: f.Name}
			for _, res := range f.Resources {
				if res.Name != string(resourceTPU) {
					continue
				}
				kf.max = res.NominalQuota.Value()
				switch {
				case cq.Spec.CohortName == "":
				case res.BorrowingLimit != nil:
					kf.max += res.BorrowingLimit.Value()
				default:
					kf.max += lentBy(cohort, f.Name)
				}
			}
			var rf kueueObject
			if err := k.kueueGet(ctx, rc, "/resourceflavors/"+f.Name, &rf); err != nil && !apierrors.IsNotFound(err) {
				return nil, backend.Wrap(apiCode(err), op, fmt.Errorf("read ResourceFlavor %s of ClusterQueue %s: %w%s", f.Name, q.cq, err, kueueRBACHint(err)))
			}
			kf.labels = rf.Spec.NodeLabels
			q.flavors = append(q.flavors, kf)
		}
	}
	return q, nil
}

// lentBy is what the cohort's other ClusterQueues can lend of flavor's
// google.com/tpu: each one's lending limit, or its nominal quota.
func lentBy(cohort []kueueObject, flavor string) int64 {
	var n int64
	for _, cq := range cohort {
		for _, g := range cq.Spec.ResourceGroups {
			for _, f := range g.Flavors {
				if f.Name != flavor {
					continue
				}
				for _, res := range f.Resources {
					if res.Name != string(resourceTPU) {
						continue
					}
					if res.LendingLimit != nil {
						n += res.LendingLimit.Value()
					} else {
						n += res.NominalQuota.Value()
					}
				}
			}
		}
	}
	return n
}

func kueueRBACHint(err error) string {
	if apierrors.IsForbidden(err) {
		return " (the driver's role needs get and list on Kueue's localqueues, clusterqueues, resourceflavors, admissionchecks and workloads: apply backend/kubernetes/deploy/rbac.yaml)"
	}
	return ""
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// kq is the runner's client of Kueue's objects.
func (r *Runner) kq() kueueClient {
	return kueueClient{client: r.client, ns: r.cfg.Namespace, lq: r.cfg.Kueue.LocalQueue}
}

// kueueGroup is one reservation's pod group.
type kueueGroup struct {
	q    *kueueQueue
	name string // the pod group's name, which is its Workload's
	// affinity[i] are the node requirements of slice i's pods: one per
	// label key the flavors select on, In the value of the slice's nodes
	// (DoesNotExist where they have none), so that Kueue assigns the
	// flavor of the nodes the pods are pinned to.
	affinity [][]corev1.NodeSelectorRequirement
	chips    int64
	flavor   string
}

// kueueGroupOf checks reservation c against the queue and returns its
// pod group: Infeasible when the slices' nodes match no flavor of the
// ClusterQueue or need more chips than it can ever admit in their flavor.
func (r *Runner) kueueGroupOf(ctx context.Context, op string, c cluster.Claim, kubeNodes [][]string, chips int64) (*kueueGroup, error) {
	q, err := r.kq().kueueQueueOf(ctx, op)
	if err != nil {
		return nil, err
	}
	g := &kueueGroup{q: q, name: r.kueueGroupName(c.ID), chips: chips}
	keys := q.labelKeys()
	var fit []kueueFlavor
	for i, hosts := range kubeNodes {
		if len(hosts) == 0 {
			g.affinity = append(g.affinity, nil)
			continue
		}
		n, err := r.client.CoreV1().Nodes().Get(ctx, hosts[0], metav1.GetOptions{})
		if err != nil {
			return nil, backend.Wrap(apiCode(err), op, fmt.Errorf("read node %s of slice %s: %w", hosts[0], c.Slices[i], err))
		}
		var reqs []corev1.NodeSelectorRequirement
		for _, k := range keys {
			if v, ok := n.Labels[k]; ok {
				reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}})
			} else {
				reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpDoesNotExist})
			}
		}
		g.affinity = append(g.affinity, reqs)
		fl := q.flavorsOf(n.Labels)
		if len(fl) == 0 {
			var names []string
			for _, f := range q.flavors {
				names = append(names, fmt.Sprintf("%s %v", f.name, f.labels))
			}
			return nil, backend.Errorf(backend.Infeasible, op, "the nodes of slice %s match no flavor with google.com/tpu quota of ClusterQueue %s (LocalQueue %s/%s), so Kueue can never admit its pods; the flavors: %s",
				c.Slices[i], q.cq, r.cfg.Namespace, q.lq, listOrNone(names))
		}
		if i == 0 {
			fit = fl
		}
	}
	best := fit[0]
	for _, f := range fit {
		if f.unbounded || f.max > best.max {
			best = f
		}
	}
	g.flavor = best.name
	if !best.unbounded && chips > best.max {
		return nil, backend.Errorf(backend.Infeasible, op, "the reservation needs %d google.com/tpu, more than ClusterQueue %s (LocalQueue %s/%s) can ever admit in flavor %s, the flavor of its slices' nodes: %d (nominal quota plus what it may borrow)",
			chips, q.cq, r.cfg.Namespace, q.lq, best.name, best.max)
	}
	return g, nil
}

// kueuePod adds the pod group's labels, annotations and node
// requirements to pod, a worker pod of slice i of the group.
func (g *kueueGroup) kueuePod(pod *corev1.Pod, i, count int, priority string) {
	pod.Labels[labelKueueQueue] = g.q.lq
	pod.Labels[labelKueueGroup] = g.name
	if priority != "" {
		pod.Labels[labelKueuePriority] = priority
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotationKueueCount] = fmt.Sprint(count)
	// Kueue ends the group's Workload once none of its pods is active,
	// and does not wait for replacements: a released or preempted
	// reservation's quota is free at once, and a new reservation is a
	// new group.
	pod.Annotations[annotationKueueRetry] = "false"
	if i < len(g.affinity) && len(g.affinity[i]) > 0 {
		terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		for j := range terms {
			terms[j].MatchExpressions = append(terms[j].MatchExpressions, g.affinity[i]...)
		}
	}
}

// kueueHeld reports whether a Kueue scheduling gate holds pod p back.
func kueueHeld(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == kueueGate || g.Name == kueueTopologyGate
	})
}

// waitAdmitted waits until Kueue has admitted the group: none of its
// workers' pods is gated any more. While it waits it logs, when it
// changes, where the group stands (kueueWaiting); the error when ctx
// ends, or when a pod is lost meanwhile, says so too.
func (r *Runner) waitAdmitted(ctx context.Context, op string, g *kueueGroup, workers []*podWorker) error {
	t0 := time.Now()
	tick := time.NewTicker(kueueWaitReportInterval)
	defer tick.Stop()
	var last string
	report := func() {
		s := r.kueueWaiting(ctx, g)
		if s != last {
			last = s
			r.log.Info("kubernetes: reservation waits for Kueue to admit it", "workload", r.cfg.Namespace+"/"+g.name,
				"localQueue", g.q.lq, "clusterQueue", g.q.cq, "status", s, "waited", time.Since(t0).Round(time.Millisecond))
		}
	}
	for {
		held := 0
		for _, w := range workers {
			if why := r.startFailed(w); why != "" {
				return backend.Errorf(backend.Unavailable, op, "%s while waiting for Kueue's admission (%s)", why, last)
			}
			p, err := r.pods.Pods(r.cfg.Namespace).Get(w.name)
			if err != nil || kueueHeld(p) {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		if last == "" || time.Since(t0) > kueueWaitReportInterval {
			select {
			case <-tick.C:
				report()
			default:
				if last == "" && time.Since(t0) > 200*time.Millisecond {
					report()
				}
			}
		}
		var changed chan struct{}
		if len(workers) > 0 {
			changed = workers[0].changed
		}
		select {
		case <-ctx.Done():
			s := r.kueueWaiting(context.WithoutCancel(ctx), g)
			return backend.Errorf(backend.CodeOf(ctx.Err()), op, "waited %v for Kueue to admit workload %s/%s: %s: %w",
				time.Since(t0).Round(time.Millisecond), r.cfg.Namespace, g.name, s, ctx.Err())
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kueueWaiting says where a group waiting for admission stands: its
// LocalQueue and ClusterQueue, its position among the LocalQueue's pending
// workloads, and the Workload's QuotaReserved condition (Kueue's reason).
func (r *Runner) kueueWaiting(ctx context.Context, g *kueueGroup) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	where := fmt.Sprintf("LocalQueue %s/%s, ClusterQueue %s, %d google.com/tpu in flavor %s", r.cfg.Namespace, g.q.lq, g.q.cq, g.chips, g.flavor)
	rc, err := r.kq().kueueRest("")
	if err != nil {
		return where
	}
	var l kueueList
	if err := r.kq().kueueGet(ctx, rc, "/namespaces/"+r.cfg.Namespace+"/workloads", &l); err != nil {
		return where + "; workloads not readable: " + err.Error()
	}
	var self *kueueObject
	for i := range l.Items {
		if l.Items[i].Metadata.Name == g.name {
			self = &l.Items[i]
		}
	}
	if self == nil {
		return where + "; Kueue has not made the group's Workload yet (it does once all the group's pods exist)"
	}
	if condStatus(self.Status.Conditions, "QuotaReserved") == metav1.ConditionTrue {
		return where + "; quota reserved: Kueue is admitting the group (lifting its pods' gates)"
	}
	prio := func(w *kueueObject) int32 {
		if w.Spec.Priority != nil {
			return *w.Spec.Priority
		}
		return 0
	}
	pending, ahead := 0, 0
	for i := range l.Items {
		w := &l.Items[i]
		if w.Spec.QueueName != g.q.lq || condStatus(w.Status.Conditions, "QuotaReserved") == metav1.ConditionTrue ||
			condStatus(w.Status.Conditions, "Finished") == metav1.ConditionTrue {
			continue
		}
		pending++
		if w != self && (prio(w) > prio(self) || prio(w) == prio(self) && w.Metadata.CreationTimestamp.Before(&self.Metadata.CreationTimestamp)) {
			ahead++
		}
	}
	s := fmt.Sprintf("%s; position %d of %d pending in the LocalQueue", where, ahead+1, pending)
	for _, c := range self.Status.Conditions {
		if c.Type == "QuotaReserved" && c.Status != metav1.ConditionTrue {
			s += fmt.Sprintf("; QuotaReserved=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
	}
	return s
}

func condStatus(conds []metav1.Condition, typ string) metav1.ConditionStatus {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// kueueStopped returns why Kueue stopped pod p (its TerminationTarget
// condition, set when Kueue evicts or preempts the pod's Workload), or "".
func kueueStopped(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if string(c.Type) == kueueTerminationTarget && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("Kueue stopped the reservation's workload (%s: %s)", c.Reason, c.Message)
		}
	}
	return ""
}

// queueReserved makes the reservation's pods as one Kueue pod group and
// waits until Kueue admits it (Reserved, in the LocalQueue mode).
func (r *Runner) queueReserved(ctx context.Context, op string, c cluster.Claim, kubeNodes [][]string, chips int64,
	workers []*podWorker, pods []*corev1.Pod, sliceOf []int) error {
	g, err := r.kueueGroupOf(ctx, op, c, kubeNodes, chips)
	if err != nil {
		return err
	}
	for i, p := range pods {
		g.kueuePod(p, sliceOf[i], len(pods), r.cfg.Kueue.PriorityClass)
	}
	for i, p := range pods {
		if _, err := r.client.CoreV1().Pods(r.cfg.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return backend.Wrap(apiCode(err), op, fmt.Errorf("create worker pod %s of Kueue pod group %s: %w", workers[i].name, g.name, err))
		}
		r.created.Add(1)
	}
	return r.waitAdmitted(ctx, op, g, workers)
}

// kueueGroupName is the pod group (and Workload) name of reservation
// claimID in the LocalQueue mode.
func (r *Runner) kueueGroupName(claimID string) string {
	return dnsName("goray", r.pt.cluster, strings.TrimPrefix(claimID, "pg-"))
}

// deleteKueueWorkload deletes the Workload of a released reservation's pod
// group (LocalQueue mode; nothing otherwise). Kueue then removes its
// finalizers from the group's pods. Without it, a group released while
// Kueue still held it (its pods gated, never run) would stay pending, be
// admitted later and hold quota with pods that can never run.
func (r *Runner) deleteKueueWorkload(ctx context.Context, name string) {
	if r.cfg.Kueue.LocalQueue == "" {
		return
	}
	rc, err := r.kq().kueueRest("")
	if err != nil {
		return
	}
	err = rc.Delete().AbsPath(kueueAPI + "/namespaces/" + r.cfg.Namespace + "/workloads/" + name).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		r.log.Warn("kubernetes: delete the Kueue Workload of a released reservation", "workload", r.cfg.Namespace+"/"+name, "err", err)
	}
}

// capacityGroups returns the Kueue pod groups of the workers' adopted
// capacity pods (the LocalQueue mode with Provision.Mode), other than
// their reservation's own: their Workloads end with the reservation.
func (r *Runner) capacityGroups(workers []*podWorker) []string {
	if r.cfg.Kueue.LocalQueue == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capacityGroupsLocked(workers)
}

// capacityGroupsLocked is capacityGroups with r.mu held.
func (r *Runner) capacityGroupsLocked(workers []*podWorker) []string {
	if r.cfg.Kueue.LocalQueue == "" || r.pods == nil {
		return nil
	}
	var out []string
	for _, w := range workers {
		p, err := r.pods.Pods(r.cfg.Namespace).Get(w.name)
		if err != nil || p.Labels[labelKueueGroup] == "" {
			continue
		}
		if g := p.Labels[labelKueueGroup]; strings.HasPrefix(g, "goray-capacity") && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// kueueSoloPod makes pod, a CPU pod, a Kueue pod group of its own in the
// LocalQueue (named as the pod, so that its Workload can be deleted with
// it), which Kueue admits against the ClusterQueue's quota of what it
// requests: with manageJobsWithoutQueueName Kueue would otherwise gate it
// for ever. A request of a resource the ClusterQueue has no quota of
// (Worker.CPU or Memory, where it covers only google.com/tpu) could never
// be admitted: FailedPrecondition at once, naming it.
func (r *Runner) kueueSoloPod(ctx context.Context, pod *corev1.Pod) error {
	op := "start CPU pod " + r.cfg.Namespace + "/" + pod.Name
	q, err := r.kq().kueueQueueOf(ctx, op)
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for res := range c.Resources.Requests {
			if !slices.Contains(q.covered, string(res)) && !slices.Contains(missing, string(res)) {
				missing = append(missing, string(res))
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return backend.Errorf(backend.FailedPrecondition, op, "the pod requests %s, which ClusterQueue %s (LocalQueue %s/%s) has no quota of (it covers %s), so Kueue could never admit it: ask the cluster's admin to add them to the ClusterQueue's resourceGroups, or leave Worker.CPU and Worker.Memory empty",
			strings.Join(missing, ", "), q.cq, r.cfg.Namespace, q.lq, listOrNone(q.covered))
	}
	pod.Labels[labelKueueQueue] = q.lq
	pod.Labels[labelKueueGroup] = pod.Name
	if p := r.cfg.Kueue.PriorityClass; p != "" {
		pod.Labels[labelKueuePriority] = p
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotationKueueCount] = "1"
	pod.Annotations[annotationKueueRetry] = "false"
	return nil
}
