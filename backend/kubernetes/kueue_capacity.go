package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// This file is capacity on demand in the LocalQueue mode (Config.Kueue
// with Provision.Mode): a reservation's capacity pods (worker pods in
// waiting, one per host of each missing slice) form one Kueue pod group
// in the LocalQueue, admitted whole against the ClusterQueue's quota.
// With ProvisionRequest the ClusterQueue's ProvisioningRequest admission
// check makes the capacity, as GKE's flex-start (Dynamic Workload
// Scheduler) guide sets Kueue up: Kueue reserves the quota, makes one
// ProvisioningRequest for the group (autoscaling.x-k8s.io/v1; it owns it
// and its PodTemplates), waits for its Provisioned condition, and only
// then admits the group, lifting its pods' gates with the annotations
// that let them consume the request. With ProvisionPods the admitted pods
// ask the cluster autoscaler for nodes themselves, as without Kueue.

// annotationKueueRoleHash names a pod's role in its Kueue pod group (the
// Workload's pod set); Kueue computes one from the pod's spec when it is
// absent. The capacity pods of one slice share a role, so each slice is
// one pod set of the group's Workload (and of its ProvisioningRequest).
const annotationKueueRoleHash = "kueue.x-k8s.io/role-hash"

// kueueCapacityPoll is how often a capacity group's Workload is read while
// the reservation waits: for its status and to fail at once when Kueue
// rejects it.
const kueueCapacityPoll = 300 * time.Millisecond

// kueueCapacity is one Provision call's capacity pods as a Kueue pod
// group.
type kueueCapacity struct {
	s     *Source
	kc    kueueClient
	q     *kueueQueue
	op    string
	name  string // the pod group's name, which is its Workload's
	count int    // pods in the group
	chips int64
	prov  bool // through the ClusterQueue's ProvisioningRequest admission check

	failed chan error // receives at most one error (cluster.ProvisioningFailer)
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// kueueCapacityOf checks a capacity request of slices × shape (hosts pods
// each) against the LocalQueue's ClusterQueue and returns its pod group:
// Infeasible when no flavor the capacity pods can get has the chips;
// FailedPrecondition with ProvisionRequest when the ClusterQueue has no
// ProvisioningRequest admission check (Kueue would admit the pods without
// asking for nodes).
func (s *Source) kueueCapacityOf(ctx context.Context, op, name string, slices int, shape tpu.SliceShape) (*kueueCapacity, error) {
	kc := kueueClient{client: s.client, ns: s.ns, lq: s.kueue.LocalQueue}
	q, err := kc.kueueQueueOf(ctx, op)
	if err != nil {
		return nil, err
	}
	count := slices * shape.Hosts()
	kg := &kueueCapacity{s: s, kc: kc, q: q, op: op, name: name, count: count,
		chips: int64(count * shape.ChipsPerHost), prov: s.prov.Mode == ProvisionRequest}
	if kg.prov && len(q.provChecks) == 0 {
		if q.checksErr != nil {
			return nil, backend.Wrap(apiCode(q.checksErr), op, q.checksErr)
		}
		return nil, backend.Errorf(backend.FailedPrecondition, op,
			"Provision.Mode %q with Kueue.LocalQueue %q: ClusterQueue %s has no ProvisioningRequest admission check (an AdmissionCheck of controllerName %s in its admissionChecksStrategy), so Kueue would admit the capacity pods without asking the cluster for nodes; ask the cluster's admin for one (as in GKE's flex-start guide), or set Provision.Mode %q to let the admitted pods ask the cluster autoscaler",
			ProvisionRequest, s.kueue.LocalQueue, q.cq, kueueProvisioningController, ProvisionPods)
	}
	// The flavors the capacity pods can get: those whose node labels do
	// not contradict the pods' node selector (Kueue adds the flavor's
	// labels to the pods it admits).
	sel := s.prov.nodeSelector(shape)
	var fit []kueueFlavor
	var names []string
	for _, f := range q.flavors {
		names = append(names, fmt.Sprintf("%s %v", f.name, f.labels))
		ok := true
		for k, v := range f.labels {
			if w, set := sel[k]; set && w != v {
				ok = false
			}
		}
		if ok {
			fit = append(fit, f)
		}
	}
	if len(fit) == 0 {
		return nil, backend.Errorf(backend.Infeasible, op, "the capacity pods (node selector %s) match no flavor with google.com/tpu quota of ClusterQueue %s (LocalQueue %s/%s), so Kueue can never admit them; the flavors: %s",
			selectorString(sel), q.cq, s.ns, q.lq, listOrNone(names))
	}
	best := fit[0]
	for _, f := range fit {
		if f.unbounded || f.max > best.max {
			best = f
		}
	}
	if !best.unbounded && kg.chips > best.max {
		return nil, backend.Errorf(backend.Infeasible, op, "the capacity needs %d google.com/tpu (%d × %s), more than ClusterQueue %s (LocalQueue %s/%s) can ever admit in any flavor the capacity pods can get; the most is %d in flavor %s (nominal quota plus what it may borrow)",
			kg.chips, slices, shape, q.cq, s.ns, q.lq, best.max, best.name)
	}
	return kg, nil
}

// label makes pod, a capacity pod of slice group g, a member of the pod
// group.
func (kg *kueueCapacity) label(pod *corev1.Pod, slice int) {
	pod.Labels[labelKueueQueue] = kg.q.lq
	pod.Labels[labelKueueGroup] = kg.name
	if p := kg.s.kueue.PriorityClass; p != "" {
		pod.Labels[labelKueuePriority] = p
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[annotationKueueCount] = strconv.Itoa(kg.count)
	pod.Annotations[annotationKueueRetry] = "false"
	pod.Annotations[annotationKueueRoleHash] = "slice-" + strconv.Itoa(slice)
}

// watch reads the group's Workload every kueueCapacityPoll until close:
// it logs where the capacity stands when that changes, and reports a
// Workload Kueue rejected (an admission check Rejected: its
// ProvisioningRequest failed, or its capacity was revoked) or deactivated
// on kg.failed.
func (kg *kueueCapacity) watch() {
	kg.failed, kg.stop, kg.done = make(chan error, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(kg.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-kg.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		t0 := time.Now()
		tick := time.NewTicker(kueueCapacityPoll)
		defer tick.Stop()
		var last string
		for {
			st, rejected := kg.status(ctx)
			if ctx.Err() != nil {
				return
			}
			if st != last {
				last = st
				kg.s.log.Info("kubernetes: capacity waits for Kueue", "workload", kg.s.ns+"/"+kg.name, "status", st,
					"waited", time.Since(t0).Round(time.Millisecond))
			}
			if rejected {
				kg.failed <- backend.Errorf(backend.ResourceExhausted, kg.op, "Kueue rejected the capacity's workload: %s", st)
				return
			}
			select {
			case <-kg.stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// close stops watch and, unless pods of the group became worker pods
// (their Workload then ends with their reservation), deletes the group's
// Workload: a group given up while Kueue held it would otherwise stay
// pending, be admitted later and hold quota (and, with the admission
// check, a ProvisioningRequest, which the Workload owns) for pods that no
// longer exist.
func (kg *kueueCapacity) close(ctx context.Context, adopted bool) error {
	if kg.stop != nil { // watching
		kg.once.Do(func() { close(kg.stop) })
		<-kg.done
	}
	if adopted {
		return nil
	}
	return kg.kc.deleteWorkload(ctx, kg.name)
}

// deleteWorkload deletes Workload name of the namespace, if it exists.
func (k kueueClient) deleteWorkload(ctx context.Context, name string) error {
	rc, err := k.kueueRest("")
	if err != nil {
		return nil
	}
	err = rc.Delete().AbsPath(kueueAPI + "/namespaces/" + k.ns + "/workloads/" + name).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Kueue Workload %s/%s: %w", k.ns, name, err)
	}
	return nil
}

// status says where the group's Workload stands: made or not, its
// QuotaReserved and Admitted conditions, each admission check's state and
// message, and its latest ProvisioningRequest's conditions; rejected is
// true once Kueue rejected or deactivated it.
func (kg *kueueCapacity) status(ctx context.Context) (st string, rejected bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	where := fmt.Sprintf("Kueue workload %s/%s (LocalQueue %s, ClusterQueue %s, %d capacity pods, %d google.com/tpu)",
		kg.s.ns, kg.name, kg.q.lq, kg.q.cq, kg.count, kg.chips)
	rc, err := kg.kc.kueueRest("")
	if err != nil {
		return where, false
	}
	var wl kueueObject
	if err := kg.kc.kueueGet(ctx, rc, "/namespaces/"+kg.s.ns+"/workloads/"+kg.name, &wl); err != nil {
		if apierrors.IsNotFound(err) {
			return where + ": not made yet (Kueue makes it once all the group's pods exist)", false
		}
		return where + ": not readable: " + err.Error(), false
	}
	var parts []string
	switch {
	case condStatus(wl.Status.Conditions, "Admitted") == metav1.ConditionTrue:
		parts = append(parts, "admitted")
	case condStatus(wl.Status.Conditions, "QuotaReserved") == metav1.ConditionTrue:
		parts = append(parts, "quota reserved, waiting for its admission checks")
	default:
		for _, c := range wl.Status.Conditions {
			if c.Type == "QuotaReserved" {
				parts = append(parts, fmt.Sprintf("QuotaReserved=%s (%s: %s)", c.Status, c.Reason, c.Message))
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "pending")
		}
	}
	if wl.Spec.Active != nil && !*wl.Spec.Active {
		rejected = true
		for _, c := range wl.Status.Conditions {
			if c.Type == "Evicted" && c.Status == metav1.ConditionTrue {
				parts = append(parts, fmt.Sprintf("deactivated (%s: %s)", c.Reason, c.Message))
			}
		}
		if len(parts) == 1 {
			parts = append(parts, "deactivated")
		}
	}
	for _, ac := range wl.Status.AdmissionChecks {
		parts = append(parts, fmt.Sprintf("admission check %s: %s", ac.Name, ac.State))
		if ac.Message != "" {
			parts[len(parts)-1] += " (" + ac.Message + ")"
		}
		if ac.State == "Rejected" {
			rejected = true
		}
	}
	if kg.prov {
		parts = append(parts, kg.requestStatus(ctx))
	}
	return where + ": " + strings.Join(parts, "; "), rejected
}

// requestStatus reads the latest ProvisioningRequest Kueue made for the
// group's Workload (it owns them) and says how it stands.
func (kg *kueueCapacity) requestStatus(ctx context.Context) string {
	rc := kg.s.restClient()
	if rc == nil {
		return "no ProvisioningRequest readable"
	}
	raw, err := rc.Get().AbsPath(kg.s.provReqPath("")).Do(ctx).Raw()
	if err != nil {
		return "ProvisioningRequests not readable: " + err.Error()
	}
	var l struct {
		Items []provReq `json:"items"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return "ProvisioningRequests not readable: " + err.Error()
	}
	var mine []provReq
	for _, pr := range l.Items {
		for _, o := range pr.Metadata.OwnerReferences {
			if o.Kind == "Workload" && o.Name == kg.name {
				mine = append(mine, pr)
			}
		}
	}
	if len(mine) == 0 {
		return "no ProvisioningRequest yet"
	}
	sort.Slice(mine, func(i, j int) bool {
		return mine[i].Metadata.CreationTimestamp.Before(&mine[j].Metadata.CreationTimestamp) ||
			mine[i].Metadata.CreationTimestamp.Equal(&mine[j].Metadata.CreationTimestamp) && mine[i].Metadata.Name < mine[j].Metadata.Name
	})
	pr := mine[len(mine)-1]
	var conds []string
	for _, c := range pr.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(conds) == 0 {
		conds = append(conds, "no conditions yet (is the cluster autoscaler serving class "+pr.Spec.ProvisioningClassName+"?)")
	}
	return fmt.Sprintf("ProvisioningRequest %s (%d of them): %s", pr.Metadata.Name, len(mine), strings.Join(conds, ", "))
}
