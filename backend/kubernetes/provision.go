package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// This file asks the cluster for TPU capacity that does not exist yet
// (cluster.Provisioner), the way GKE expects: pending pods whose node
// selectors and google.com/tpu requests name the slice. GKE Autopilot and
// node auto-provisioning create a node pool for them; a Standard cluster's
// autoscaled multi-host TPU node pool scales from 0 to its whole slice for
// them.

// ProvisionMode is how the backend asks for capacity.
type ProvisionMode string

const (
	// ProvisionOff (the default) uses only the nodes the cluster has.
	ProvisionOff ProvisionMode = ""
	// ProvisionPods creates pending capacity pods, one per host of each
	// missing slice, which the cluster autoscaler (or Autopilot, or node
	// auto-provisioning) answers with a new TPU node pool per slice.
	ProvisionPods ProvisionMode = "pods"
	// ProvisionRequest creates one ProvisioningRequest
	// (autoscaling.x-k8s.io/v1) for all slices a reservation is short
	// of, with a PodTemplate of its capacity pods, and the capacity pods
	// themselves marked as consuming it: the cluster autoscaler grants
	// every node of the request at once or none, so a multislice comes
	// up whole or not at all (GKE's queued provisioning, flex-start).
	ProvisionRequest ProvisionMode = "provisioning-request"
)

// DefaultProvisioningClass is the ProvisioningRequest class of
// ProvisionRequest when none is configured: GKE's queued provisioning.
const DefaultProvisioningClass = "queued-provisioning.gke.io"

// The annotations by which a pod consumes a ProvisioningRequest's
// capacity (the cluster autoscaler's provreq support; GKE's queued
// provisioning without Kueue).
const (
	annotationConsumeProvReq = "autoscaling.x-k8s.io/consume-provisioning-request"
	annotationProvReqClass   = "autoscaling.x-k8s.io/provisioning-class-name"
)

// DefaultCapacityImage is the default image of placeholder capacity pods
// (ProvisionConfig.Placeholders): they only hold the nodes until the
// worker pods replace them.
const DefaultCapacityImage = "registry.k8s.io/pause:3.10"

// DefaultCapacityPriorityClass is the capacity pods' default
// PriorityClass, from deploy/capacity.yaml: the default workloads'
// priority (0), so that a capacity pod that becomes a worker pod is not
// preempted by ordinary pods, with preemptionPolicy Never, so that a
// pending capacity pod preempts nothing to get its node.
const DefaultCapacityPriorityClass = "goray-capacity"

// GKE's node labels for how a TPU VM is bought
// (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms,
// .../how-to/consuming-reservations, .../how-to/tpu-flex-start).
const (
	labelGKESpot                = "cloud.google.com/gke-spot"
	labelGKEReservationName     = "cloud.google.com/reservation-name"
	labelGKEReservationAffinity = "cloud.google.com/reservation-affinity"
	labelGKEFlexStart           = "cloud.google.com/gke-flex-start"
)

// labelCapacity marks a capacity pod; its value is the pod's group (one
// group per slice asked for).
const labelCapacity = labelPrefix + "capacity"

// ProvisionConfig configures how the backend asks for TPU capacity (see
// Config.Provision and docs/kubernetes.md).
type ProvisionConfig struct {
	// Mode is ProvisionOff (the default), ProvisionPods or
	// ProvisionRequest.
	Mode ProvisionMode
	// Class is the ProvisioningRequest class of ProvisionRequest; ""
	// means DefaultProvisioningClass. The cluster autoscaler's own atomic
	// class is "best-effort-atomic-scale-up.autoscaling.x-k8s.io".
	Class string
	// Spot asks for Spot VMs (node selector cloud.google.com/gke-spot,
	// and its taint tolerated). Spot slices can be preempted at any time:
	// their work fails with Unavailable and is retried elsewhere.
	Spot bool
	// Reservation asks for the Compute Engine reservation of that name
	// (cloud.google.com/reservation-name, reservation-affinity specific).
	Reservation string
	// FlexStart asks for flex-start VMs (cloud.google.com/gke-flex-start).
	FlexStart bool
	// Placeholders makes the capacity pods placeholders that run Image and
	// are replaced by new worker pods once the driver has claimed their
	// slice. By default (false) a capacity pod is a worker pod in waiting:
	// it runs the worker (Config.Worker's image, command and resources,
	// the host's google.com/tpu), starts as soon as its node exists, and
	// becomes the worker pod of the host it landed on when the driver
	// claims the slice, which sends it the reservation's env when it
	// connects: no pod is created or deleted after the claim.
	Placeholders bool
	// BindWait bounds how long a claim of a slice that just appeared
	// waits for the scheduler to bind this driver's pending worker pods
	// in waiting to its hosts (it may hold pods back after failed tries,
	// up to its backoff of 10 s) before it starts new worker pods on the
	// hosts still without one; 0 means DefaultBindWait.
	BindWait time.Duration
	// Image is the placeholder capacity pods' image; "" means
	// DefaultCapacityImage. Unused without Placeholders.
	Image string
	// PriorityClass is the capacity pods' PriorityClass; "" means
	// DefaultCapacityPriorityClass (apply deploy/capacity.yaml). A
	// capacity pod that becomes a worker pod keeps it (a pod's priority
	// does not change), so its value should be the worker pods' priority,
	// and at least the cluster autoscaler's expendable-pods cutoff (-10 by
	// default) for the pods to trigger scale-ups.
	PriorityClass string
}

func (p ProvisionConfig) validate() []error {
	var errs []error
	switch p.Mode {
	case ProvisionOff, ProvisionPods, ProvisionRequest:
	default:
		errs = append(errs, fmt.Errorf("Provision.Mode %q: want %q (off, the default), %q or %q", p.Mode, ProvisionOff, ProvisionPods, ProvisionRequest))
	}
	if p.BindWait < 0 {
		errs = append(errs, fmt.Errorf("Provision.BindWait %v: want a duration ≥ 0 (0 means %v)", p.BindWait, DefaultBindWait))
	}
	for _, m := range validation.IsDNS1123Subdomain(p.Class) {
		if p.Class != "" {
			errs = append(errs, fmt.Errorf("Provision.Class %q: %s", p.Class, m))
		}
	}
	if p.Spot && (p.Reservation != "" || p.FlexStart) || p.Reservation != "" && p.FlexStart {
		errs = append(errs, fmt.Errorf("Provision: Spot %v, Reservation %q and FlexStart %v: choose at most one way to buy the VMs", p.Spot, p.Reservation, p.FlexStart))
	}
	return errs
}

// nodeSelector is what a capacity pod of shape asks of its node.
func (p ProvisionConfig) nodeSelector(shape tpu.SliceShape) map[string]string {
	sel := map[string]string{
		tpu.LabelGKEAccelerator: shape.Generation.GKEAccelerator(),
		tpu.LabelGKETopology:    shape.Topology.String(),
	}
	switch {
	case p.Spot:
		sel[labelGKESpot] = "true"
	case p.Reservation != "":
		sel[labelGKEReservationName] = p.Reservation
		sel[labelGKEReservationAffinity] = "specific"
	case p.FlexStart:
		sel[labelGKEFlexStart] = "true"
	}
	return sel
}

// Provision implements cluster.Provisioner: with ProvisionPods it creates
// one pending capacity pod per host of each missing slice. The pods of
// one slice share a group: a required pod affinity on
// cloud.google.com/gke-nodepool keeps them on one node pool, and a
// required anti-affinity keeps every other group (of this driver or
// another) off that pool, as JobSet's exclusive placement does, so each
// group makes one whole new slice. Unless Placeholders is set, each
// capacity pod is a worker pod in waiting (standbyPod), which becomes the
// worker pod of the host it lands on when this driver claims the slice.
func (s *Source) Provision(ctx context.Context, req cluster.ProvisionRequest) (cluster.Provisioning, error) {
	op := "provision " + strconv.Itoa(req.NumSlices) + " × " + req.Shape.String()
	if s.prov.Mode == ProvisionOff {
		return nil, fmt.Errorf("%s: Config.Provision.Mode is off: %w", op, errors.ErrUnsupported)
	}
	if req.NumSlices < 1 {
		return nil, backend.Errorf(backend.InvalidArgument, op, "want at least 1 slice")
	}
	if req.Shape.Generation.GKEAccelerator() == "" {
		return nil, backend.Errorf(backend.Infeasible, op, "GKE has no TPU node pools of %s", req.Shape.Generation)
	}
	pv := &provisioning{s: s, op: op, shape: req.Shape, hosts: req.Shape.Hosts()}
	base := []string{"goray-capacity"}
	if req.Name != "" {
		base = append(base, req.Name)
	}
	base = append(base, randomSuffix())
	for k := range req.NumSlices {
		// A label value (≤ 63 characters) and a prefix of pod names.
		pv.groups = append(pv.groups, dnsName(append(base, strconv.Itoa(k))...))
	}
	if s.leases != nil {
		// This handle's Lease first: capacity of a handle without one is
		// a gone driver's. And what gone drivers left is removed, so that
		// their pending pods stop asking for capacity.
		if err := s.leases.ensureHandle(ctx); err != nil {
			return nil, backend.Wrap(apiCode(errors.Unwrap(err)), op, err)
		}
		s.sweepGone(ctx)
	}
	if s.kueue.LocalQueue != "" {
		// The LocalQueue mode: the capacity pods are one Kueue pod group;
		// with ProvisionRequest the ClusterQueue's admission check makes
		// the ProvisioningRequest, not the driver.
		kg, err := s.kueueCapacityOf(ctx, op, dnsName(base...), req.NumSlices, req.Shape)
		if err != nil {
			return nil, err
		}
		pv.kueue = kg
	} else if s.prov.Mode == ProvisionRequest {
		if err := pv.createRequest(ctx, dnsName(base...), req.NumSlices*pv.hosts); err != nil {
			return nil, err
		}
	}
	for k, g := range pv.groups {
		for i := range pv.hosts {
			pod := s.capacityPod(g, i, req.Shape)
			if pv.kueue != nil {
				pv.kueue.label(pod, k)
			}
			if pv.provReq != "" {
				if pod.Annotations == nil {
					pod.Annotations = map[string]string{}
				}
				pod.Annotations[annotationConsumeProvReq], pod.Annotations[annotationProvReqClass] = pv.provReq, s.prov.Class
			}
			if _, err := s.client.CoreV1().Pods(s.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				_ = pv.Close(cctx)
				cancel()
				if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PriorityClass") {
					return nil, backend.Errorf(backend.FailedPrecondition, op, "create capacity pod %s: %w (apply backend/kubernetes/deploy/capacity.yaml, or name an existing class in Config.Provision.PriorityClass)", pod.Name, err)
				}
				return nil, backend.Wrap(apiCode(err), op, fmt.Errorf("create capacity pod %s: %w", pod.Name, err))
			}
		}
	}
	if pv.kueue != nil {
		pv.kueue.watch()
	}
	s.log.Info("kubernetes: asked the cluster for TPU capacity", "slices", req.NumSlices, "shape", req.Shape.String(), "pods", req.NumSlices*pv.hosts, "groups", strings.Join(pv.groups, ","))
	return pv, nil
}

// capacityPod is host i's capacity pod of group g: a worker pod in
// waiting (the runner's template, through s.workerPod) or, with
// Placeholders or without a runner, a placeholder running Image.
func (s *Source) capacityPod(g string, i int, shape tpu.SliceShape) *corev1.Pod {
	if s.workerPod != nil && !s.prov.Placeholders {
		return s.standbyPod(g, i, shape)
	}
	chips := resource.MustParse(strconv.Itoa(shape.ChipsPerHost))
	res := corev1.ResourceList{resourceTPU: chips}
	tolerations := []corev1.Toleration{{Key: string(resourceTPU), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: capacityPodName(g, i),
			Labels: map[string]string{
				labelCapacity: g, LabelCluster: s.cluster, labelManagedBy: managedBy,
			},
		},
		Spec: corev1.PodSpec{
			NodeSelector:                  s.prov.nodeSelector(shape),
			Tolerations:                   s.capacityTolerations(tolerations),
			TerminationGracePeriodSeconds: &zero,
			PriorityClassName:             s.prov.PriorityClass,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Affinity:                      capacityAffinity(g),
			Containers: []corev1.Container{{
				Name: "capacity", Image: s.prov.Image,
				Resources: corev1.ResourceRequirements{Requests: res, Limits: maps.Clone(res)},
			}},
		},
	}
}

// standbyPod is host i's capacity pod of group g as a worker pod in
// waiting: the runner's worker pod for a host of shape, with the group's
// placement instead of a node pin, its own name as its DNS hostname in
// the handle's Service, and the capacity pods' labels, priority and
// tolerations. The runner adopts it when this driver claims the slice of
// the node it landed on (Runner.HostNames).
func (s *Source) standbyPod(g string, i int, shape tpu.SliceShape) *corev1.Pod {
	name := capacityPodName(g, i)
	p := s.workerPod(podSpec{name: name, chips: shape.ChipsPerHost, hostname: name, labels: map[string]string{labelCapacity: g}})
	delete(p.Labels, LabelNode)
	zero := int64(0)
	p.Spec.NodeSelector = s.prov.nodeSelector(shape)
	p.Spec.Affinity = capacityAffinity(g)
	p.Spec.Tolerations = s.capacityTolerations(p.Spec.Tolerations)
	p.Spec.PriorityClassName = s.prov.PriorityClass
	p.Spec.TerminationGracePeriodSeconds = &zero
	return p
}

// capacityTolerations adds the Spot taint's toleration when the capacity
// asked for is Spot.
func (s *Source) capacityTolerations(tolerations []corev1.Toleration) []corev1.Toleration {
	if s.prov.Spot {
		tolerations = append(tolerations, corev1.Toleration{Key: labelGKESpot, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule})
	}
	return tolerations
}

// capacityAffinity keeps group g's pods on one node pool and every other
// group off it, as JobSet's exclusive placement does.
func capacityAffinity(g string) *corev1.Affinity {
	inGroup := &metav1.LabelSelector{MatchLabels: map[string]string{labelCapacity: g}}
	otherGroups := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: labelCapacity, Operator: metav1.LabelSelectorOpExists},
		{Key: labelCapacity, Operator: metav1.LabelSelectorOpNotIn, Values: []string{g}},
	}}
	return &corev1.Affinity{
		PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: inGroup, TopologyKey: tpu.LabelGKENodePool,
		}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: otherGroups, TopologyKey: tpu.LabelGKENodePool,
		}}},
	}
}

// provisioning is one Provision call's capacity pods.
type provisioning struct {
	s      *Source
	op     string
	shape  tpu.SliceShape
	hosts  int
	groups []string
	// provReq names the ProvisioningRequest and its PodTemplate
	// (ProvisionRequest), or is "".
	provReq string
	// kueue is the capacity pods' Kueue pod group (the LocalQueue mode),
	// or nil.
	kueue *kueueCapacity
}

// Failed implements cluster.ProvisioningFailer: in the LocalQueue mode,
// Kueue rejecting the capacity's Workload (its ProvisioningRequest
// failed, or its capacity was revoked) fails the reservation at once
// with ResourceExhausted. Otherwise it never fails.
func (pv *provisioning) Failed() <-chan error {
	if pv.kueue == nil {
		return nil
	}
	return pv.kueue.failed
}

var _ cluster.ProvisioningFailer = (*provisioning)(nil)

func (pv *provisioning) selector() string {
	return labelCapacity + " in (" + strings.Join(pv.groups, ",") + ")"
}

// Close implements cluster.Provisioning: it deletes every capacity pod of
// the request that is left (the granted slices' were replaced by worker
// pods when they were claimed), by name and all at once: a reservation
// returns only once its provisioning is closed, so this is on its path.
func (pv *provisioning) Close(ctx context.Context) error {
	var names []string
	adopted := pv.s.adoptedPods() // the runner's worker pods now
	for _, g := range pv.groups {
		for i := range pv.hosts {
			if name := capacityPodName(g, i); !adopted[name] {
				names = append(names, name)
			}
		}
	}
	errs := make([]error, 3)
	var wg sync.WaitGroup
	if pv.provReq != "" {
		wg.Go(func() { errs[0] = pv.deleteRequest(ctx) })
	}
	errs[1] = deletePodsNamed(ctx, pv.s.client, pv.s.ns, names)
	if pv.kueue != nil {
		errs[2] = pv.kueue.close(ctx, len(names) < len(pv.groups)*pv.hosts)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// capacityPodName is the name of host i's capacity pod of group g.
func capacityPodName(g string, i int) string { return fmt.Sprintf("%s-%d", g, i) }

// deletePodsNamed deletes the named pods with no grace period, at most
// 16 calls at a time, retrying transient API errors; pods already gone
// are fine, and a pod found gone is not asked for again (retriable counts
// NotFound as transient, as a Lease's update needs, which here would
// retry a pod that the claim already deleted for seconds).
func deletePodsNamed(ctx context.Context, client kubernetes.Interface, ns string, names []string) error {
	pods := client.CoreV1().Pods(ns)
	errs := make([]error, len(names))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	again := func(err error) bool { return !apierrors.IsNotFound(err) && retriable(err) }
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := retry.OnError(apiBackoff, again, func() error {
				return pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			})
			if err != nil && !apierrors.IsNotFound(err) {
				errs[i] = fmt.Errorf("delete pod %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return backend.Wrap(backend.Unavailable, "delete capacity pods", err)
	}
	return nil
}

// Status implements cluster.Provisioning: how many capacity pods are still
// pending, and the latest scheduling and autoscaler events about them
// (FailedScheduling, NotTriggerScaleUp, FailedScaleUp, TriggeredScaleUp),
// which say "quota exceeded", "out of resources" or "pending" in GKE's words.
func (pv *provisioning) Status(ctx context.Context) string {
	s := pv.s
	pods, err := s.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: pv.selector()})
	if err != nil {
		return "could not read the capacity pods: " + err.Error()
	}
	var pending []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			pending = append(pending, p.Name)
		}
	}
	total := len(pv.groups) * pv.hosts
	msg := fmt.Sprintf("%d of %d capacity pods (%s, google.com/tpu %d each) still pending", len(pending), total,
		selectorString(s.prov.nodeSelector(pv.shape)), pv.shape.ChipsPerHost)
	latest := map[string]corev1.Event{}
	for _, name := range pending {
		evs, err := s.client.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Pod", "involvedObject.name": name,
		}.AsSelector().String()})
		if err != nil {
			if !apierrors.IsForbidden(err) {
				msg += "; could not read events: " + err.Error()
			}
			break
		}
		for _, e := range evs.Items {
			if prev, ok := latest[e.Reason]; !ok || eventTime(e).After(eventTime(prev)) {
				latest[e.Reason] = e
			}
		}
	}
	if pv.provReq != "" {
		msg += "; " + pv.requestStatus(ctx)
	}
	if pv.kueue != nil {
		st, _ := pv.kueue.status(ctx)
		msg += "; " + st
	}
	reasons := slices.Sorted(maps.Keys(latest))
	for _, r := range reasons {
		msg += "; " + r + ": " + strings.TrimSpace(latest[r].Message)
	}
	if len(pending) > 0 && len(reasons) == 0 {
		msg += "; no event from the scheduler or the autoscaler yet (is cluster autoscaling or node auto-provisioning on for this TPU shape?)"
	}
	return msg
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func selectorString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// freshGrace is how long after a slice's last node appeared another
// driver's pending capacity pods of its shape keep it from this driver:
// the scheduler binds the requester's capacity pods to the new pool within
// that time.
const freshGrace = 30 * time.Second

// capacityCheck keeps capacity provisioned for another driver from this
// one, and makes room for this driver's worker pods on capacity it
// provisioned itself: before c's Leases are claimed it returns a
// HeldError if another driver's capacity pods sit on a host of c, or
// wait for a slice of c's shape that appeared less than freshGrace ago;
// after the claim (replace), this driver's own capacity pods on c's
// hosts are deleted, so the worker pods replace them.
func (s *Source) capacityCheck(ctx context.Context, c cluster.Claim) error {
	if c.Subslice {
		return nil
	}
	// From the API server's watch cache (ResourceVersion "0"), not a
	// quorum read of etcd: this runs on every claim, and capacity pods
	// stay for many seconds, far longer than the cache lags.
	pods, err := s.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: labelCapacity, ResourceVersion: "0"})
	if err != nil {
		return backend.Wrap(apiCode(err), "claim slices", fmt.Errorf("list capacity pods: %w", err))
	}
	if len(pods.Items) == 0 {
		return nil
	}
	var held []string
	holder := ""
	gone := map[string]bool{} // by handle: its requester is gone (handles.go)
	checked := map[string]bool{}
	isGone := func(p *corev1.Pod) bool {
		id := p.Labels[LabelCluster]
		if !checked[id] {
			checked[id] = true
			maps.Copy(gone, s.goneHandles(ctx, []corev1.Pod{*p}))
		}
		return gone[id]
	}
	for _, name := range c.Slices {
		hosts, shape, newest := s.sliceNodes(name)
		fresh := time.Since(newest) < freshGrace
		for _, p := range pods.Items {
			if p.Labels[LabelCluster] == s.cluster || p.DeletionTimestamp != nil {
				continue
			}
			// A capacity pod that ended holds no chips: it keeps the slice
			// for its requester only while the slice is fresh.
			if finished(&p) && !fresh {
				continue
			}
			onHost := p.Spec.NodeName != "" && slices.Contains(hosts, p.Spec.NodeName)
			waiting := p.Spec.NodeName == "" && fresh && selectsShape(&p, shape)
			if (onHost || waiting) && !isGone(&p) {
				held = append(held, name)
				holder = "the driver whose capacity pods are " + p.Labels[labelCapacity]
				break
			}
		}
	}
	if len(held) > 0 {
		return &cluster.HeldError{Slices: held, Holder: holder}
	}
	return nil
}

// replaceCapacity makes room for c's worker pods on the capacity this
// driver provisioned: a capacity pod on a host of c that runs the worker
// in waiting stays, to become the host's worker pod (recorded in
// s.adoptions, for the runner and so that closing its provisioning
// leaves it), and this driver's other capacity pods on the
// hosts of c, and the pods of their groups that the scheduler has not
// bound yet (a group asks for one whole pool, so they would bind to c's
// hosts next), are deleted, all at once, with no grace period: the API
// server removes them at once, and the scheduler, which sees the
// deletions on its pod watch before the worker pods created after them,
// places the worker pods on the chips they held.
func (s *Source) replaceCapacity(ctx context.Context, c cluster.Claim) error {
	if c.Subslice || s.prov.Mode == ProvisionOff {
		return nil // a driver that does not provision has no capacity pods
	}
	var hosts []string
	var fresh []map[string]string // the shapes of c's slices that just appeared
	for _, name := range c.Slices {
		h, shape, newest := s.sliceNodes(name)
		hosts = append(hosts, h...)
		if time.Since(newest) < freshGrace {
			fresh = append(fresh, shape)
		}
	}
	pods, groups, err := s.capacityOnHosts(ctx, c, hosts, fresh)
	if err != nil {
		return err
	}
	adopt := map[string]string{} // runtime host → pod
	var victims []string
	for _, p := range pods.Items {
		onHost := p.Spec.NodeName != "" && slices.Contains(hosts, p.Spec.NodeName)
		if onHost && standby(&p) {
			s.mu.Lock()
			host := cmp.Or(s.rt[p.Spec.NodeName], p.Spec.NodeName)
			s.mu.Unlock()
			if adopt[host] == "" {
				adopt[host] = p.Name
				continue
			}
		}
		if onHost || p.Spec.NodeName == "" && groups[p.Labels[labelCapacity]] {
			victims = append(victims, p.Name)
		}
	}
	if err := deletePodsNamed(ctx, s.client, s.ns, victims); err != nil {
		return backend.Wrap(backend.Unavailable, "claim slices", err)
	}
	if len(adopt) > 0 {
		s.adoptions.Store(c.ID, adopt)
	}
	return nil
}

// capacityOnHosts lists this driver's capacity pods for a claim c of
// hosts, and returns the groups of those on the hosts. A claim follows a
// new slice's last node by milliseconds, when the scheduler may not have
// bound this driver's worker pods in waiting yet: while a host has none
// and some are pending that can land there (of a group already on the
// hosts, whose pool it is, or of the shape of a slice that just
// appeared, fresh), they are listed again every 10 ms for up to
// Provision.BindWait, so that each becomes its host's worker pod instead
// of being replaced by a new one.
func (s *Source) capacityOnHosts(ctx context.Context, c cluster.Claim, hosts []string, fresh []map[string]string) (*corev1.PodList, map[string]bool, error) {
	start := time.Now()
	for {
		pods, err := s.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: labelCapacity + "," + LabelCluster + "=" + s.cluster})
		if err != nil {
			return nil, nil, backend.Wrap(apiCode(err), "claim slices", fmt.Errorf("list capacity pods: %w", err))
		}
		groups, covered := map[string]bool{}, map[string]bool{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && slices.Contains(hosts, p.Spec.NodeName) {
				groups[p.Labels[labelCapacity]] = true
				if standby(&p) {
					covered[p.Spec.NodeName] = true
				}
			}
		}
		binding := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" || !standby(&p) {
				continue
			}
			if groups[p.Labels[labelCapacity]] || slices.ContainsFunc(fresh, func(shape map[string]string) bool { return selectsShape(&p, shape) }) {
				binding++
			}
		}
		if len(covered) == len(hosts) || binding == 0 {
			return pods, groups, nil
		}
		if time.Since(start) >= s.prov.BindWait {
			s.log.Info("kubernetes: capacity pods not bound to the claimed slices in time: new worker pods replace them",
				"claim", c.ID, "slices", strings.Join(c.Slices, ","), "waited", s.prov.BindWait, "hosts without one", len(hosts)-len(covered), "pending", binding)
			return pods, groups, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, backend.Wrap(backend.CodeOf(ctx.Err()), "claim slices", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// DefaultBindWait is ProvisionConfig.BindWait's default.
const DefaultBindWait = 2 * time.Second

// selectsShape reports whether capacity pod p asks for the slice shape
// of shape's GKE labels (sliceNodes).
func selectsShape(p *corev1.Pod, shape map[string]string) bool {
	return p.Spec.NodeSelector[tpu.LabelGKEAccelerator] == shape[tpu.LabelGKEAccelerator] &&
		p.Spec.NodeSelector[tpu.LabelGKETopology] == shape[tpu.LabelGKETopology]
}

// standby reports whether p, a capacity pod, is a worker pod in waiting
// that can still become one: it has its DNS hostname (a placeholder has
// none), and it is neither being deleted nor ended.
func standby(p *corev1.Pod) bool {
	return p.Spec.Hostname == p.Name && p.Spec.Subdomain != "" && p.DeletionTimestamp == nil && podProblem(p) == ""
}

// adoptionsOf returns the capacity pods that become the worker pods of
// claim ID, by the runtime name of their host (Runner.HostNames). It does
// not take s.mu: the runtime asks with its own lock held.
func (s *Source) adoptionsOf(claimID string) map[string]string {
	if a, ok := s.adoptions.Load(claimID); ok {
		return a.(map[string]string)
	}
	return nil
}

// sliceNodes returns the Kubernetes nodes of a reported slice, the GKE
// labels of its shape, and when its newest node was created.
func (s *Source) sliceNodes(slice string) (hosts []string, shape map[string]string, newest time.Time) {
	s.mu.Lock()
	if st := s.slices[slice]; st != nil {
		hosts = slices.Clone(st.hosts)
	}
	s.mu.Unlock()
	shape = map[string]string{}
	for _, h := range hosts {
		obj, ok, _ := s.nodes.GetStore().GetByKey(h)
		if n, _ := obj.(*corev1.Node); ok && n != nil {
			shape[tpu.LabelGKEAccelerator] = n.Labels[tpu.LabelGKEAccelerator]
			shape[tpu.LabelGKETopology] = n.Labels[tpu.LabelGKETopology]
			if t := n.CreationTimestamp.Time; t.After(newest) {
				newest = t
			}
		}
	}
	return hosts, shape, newest
}
