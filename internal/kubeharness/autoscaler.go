//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// This file is a GKE-like cluster autoscaler for TPU node pools, which
// tests switch on with StartAutoscaler. It models what GKE's cluster
// autoscaler and node auto-provisioning do for TPUs
// (https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler,
// .../concepts/node-auto-provisioning, .../how-to/tpus#autoscaling):
//
//   - A pending pod the scheduler found no node for (PodScheduled False,
//     Unschedulable) that requests google.com/tpu and selects a TPU
//     accelerator and topology (cloud.google.com/gke-tpu-accelerator,
//     cloud.google.com/gke-tpu-topology) triggers a scale-up: a new node
//     pool of one whole slice, every host at once (multi-host TPU pools
//     scale atomically), after Delay. Pods that share a required pod
//     affinity on cloud.google.com/gke-nodepool (JobSet's exclusive
//     placement, goray's capacity pods) share one new pool.
//   - The new nodes carry GKE's TPU labels, google.com/tpu capacity, the
//     google.com/tpu taint, and for Spot (the pod selects
//     cloud.google.com/gke-spot=true) the Spot label.
//   - A quota of TPU chips per accelerator: a scale-up beyond it does not
//     happen, and the pods get a FailedScaleUp event in GKE's words
//     ("GCE quota exceeded").
//   - A pool the autoscaler made is deleted once no pod has run on it for
//     ScaleDownAfter (scale to zero).
//   - Preempt deletes a Spot pool's nodes at once, as a Spot preemption
//     does.
//
// Not modelled: zones, machine provisioning failures other than quota
// (FailProvisioningRequests fails ProvisioningRequests on demand), scale-up of existing pools, and GKE's minimum
// delays (a real scale-up takes minutes; Delay defaults to 300ms).

// AutoscalerOptions configures StartAutoscaler.
type AutoscalerOptions struct {
	// Delay is how long a scale-up takes; default 300ms.
	Delay time.Duration
	// ScaleDownAfter is how long a pool it made must stay empty (no pod
	// other than a finished one) before it deletes it; default 2s.
	ScaleDownAfter time.Duration
	// Quota caps the TPU chips of the pools it makes, per accelerator
	// label value ("tpu-v6e-slice": 16); an accelerator not in the map
	// has no cap.
	Quota map[string]int
	// Kwok makes the new pools kwok nodes (simulated pods) instead of
	// node-agent nodes (pods run as local processes).
	Kwok bool
	// ProvisioningRequests installs the ProvisioningRequest CRD
	// (autoscaling.x-k8s.io/v1) and serves its requests atomically: all
	// pools of a request at once after Delay (Provisioned=True), or none
	// while the quota does not allow all (Provisioned=False,
	// QuotaExceeded). Pods that consume a request
	// (autoscaling.x-k8s.io/consume-provisioning-request) never trigger a
	// scale-up of their own.
	ProvisioningRequests bool
}

// Autoscaler is the harness's GKE-like autoscaler (see StartAutoscaler).
type Autoscaler struct {
	cp     *ControlPlane
	opts   AutoscalerOptions
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	next   int
	pools  map[string]*scaledPool // by pool name
	groups map[string]string      // pod group → pool (being) made for it
	warned map[string]time.Time   // pod group → last quota event
	log    []string
	ups    []ScaleUp
	// provReqs are the ProvisioningRequests seen: namespace/name → state
	// ("provisioning", "provisioned", "quota").
	provReqs map[string]string
	failNext *provFailure // FailProvisioningRequests
	dyn      dynamic.Interface
}

type scaledPool struct {
	name       string
	accel      string
	chips      int // in all
	nodes      []string
	ready      bool
	triggered  time.Time
	readyAt    time.Time
	emptySince time.Time
	podLabels  []map[string]string // of the pods that triggered it
	provReq    string              // namespace/name of the ProvisioningRequest it was made for
}

// StartAutoscaler starts the autoscaler; it stops when the test ends,
// deleting nothing it made (the control plane goes with the test).
func (cp *ControlPlane) StartAutoscaler(tb testing.TB, opts AutoscalerOptions) *Autoscaler {
	tb.Helper()
	if opts.Delay == 0 {
		opts.Delay = 300 * time.Millisecond
	}
	if opts.ScaleDownAfter == 0 {
		opts.ScaleDownAfter = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Autoscaler{cp: cp, opts: opts, cancel: cancel, done: make(chan struct{}),
		pools: map[string]*scaledPool{}, groups: map[string]string{}, warned: map[string]time.Time{},
		provReqs: map[string]string{}}
	if opts.ProvisioningRequests {
		dyn, err := installProvisioningRequestCRD(ctx, cp)
		if err != nil {
			cancel()
			tb.Fatalf("kubeharness: autoscaler: %v", err)
		}
		a.dyn = dyn
	}
	go a.loop(ctx)
	tb.Cleanup(a.Stop)
	return a
}

// Stop stops the autoscaler and waits for it.
func (a *Autoscaler) Stop() {
	a.cancel()
	<-a.done
}

// SetQuota changes the quota of TPU chips of accel (as a project's quota
// raised, or taken by other work); a negative chips removes the cap. It
// applies to the next scale-up.
func (a *Autoscaler) SetQuota(accel string, chips int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := maps.Clone(a.opts.Quota)
	if q == nil {
		q = map[string]int{}
	}
	if chips < 0 {
		delete(q, accel)
	} else {
		q[accel] = chips
	}
	a.opts.Quota = q
	a.note("quota %s set to %d", accel, chips)
}

// Pools returns the names of the pools it made that exist now.
func (a *Autoscaler) Pools() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.pools))
}

// Events returns what it did, in order ("scale-up pool-1 tpu-v6e-slice
// 4x4: 4 nodes", "scale-down pool-1", "quota ...", "preempt pool-1").
func (a *Autoscaler) Events() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.log)
}

func (a *Autoscaler) note(format string, args ...any) {
	a.log = append(a.log, fmt.Sprintf(format, args...))
}

// Preempt deletes the nodes of a pool it made at once, as a Spot
// preemption does.
func (a *Autoscaler) Preempt(ctx context.Context, pool string) error {
	a.mu.Lock()
	p := a.pools[pool]
	if p != nil {
		delete(a.pools, pool)
		a.note("preempt %s", pool)
	}
	a.mu.Unlock()
	if p == nil {
		return fmt.Errorf("preempt %q: no such pool made by the autoscaler; it has %v", pool, a.Pools())
	}
	return a.deleteNodes(ctx, p)
}

func (a *Autoscaler) loop(ctx context.Context) {
	defer close(a.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.scaleUp(ctx, &wg)
		if a.dyn != nil {
			a.serveRequests(ctx, &wg)
		}
		a.scaleDown(ctx)
	}
}

// tpuAsk is what one pending pod asks of a new TPU node.
type tpuAsk struct {
	accel, topology string
	chipsPerHost    int
	spot            bool
}

func askOf(p *corev1.Pod) (tpuAsk, bool) {
	sel := p.Spec.NodeSelector
	a := tpuAsk{accel: sel[LabelTPUAccelerator], topology: sel[LabelTPUTopology], spot: sel["cloud.google.com/gke-spot"] == "true"}
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[ResourceTPU]; ok {
			a.chipsPerHost += int(q.Value())
		}
	}
	return a, a.accel != "" && a.topology != "" && a.chipsPerHost > 0
}

// unschedulable reports whether the scheduler found no node for p: the
// cluster autoscaler acts only on such pods (PodScheduled False, reason
// Unschedulable), not on pods the scheduler has yet to look at.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// groupOf is the pool group of a pending pod: the label selector of its
// required pod affinity on the node pool, else the pod alone.
func groupOf(p *corev1.Pod) string {
	if aff := p.Spec.Affinity; aff != nil && aff.PodAffinity != nil {
		for _, t := range aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if t.TopologyKey == LabelNodePool && t.LabelSelector != nil {
				return p.Namespace + "/" + metav1.FormatLabelSelector(t.LabelSelector)
			}
		}
	}
	return p.Namespace + "/pod/" + p.Name
}

func (a *Autoscaler) scaleUp(ctx context.Context, wg *sync.WaitGroup) {
	pods, err := a.cp.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=,status.phase=Pending"})
	if err != nil {
		return
	}
	byGroup := map[string][]*corev1.Pod{}
	asks := map[string]tpuAsk{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || !unschedulable(p) || p.Annotations[annotationConsumeProvReq] != "" {
			continue
		}
		ask, ok := askOf(p)
		if !ok {
			continue
		}
		g := groupOf(p)
		byGroup[g] = append(byGroup[g], p)
		asks[g] = ask
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for g, pods := range byGroup {
		if pool, ok := a.groups[g]; ok {
			// Being made, or just made and its pods not bound yet. Pods
			// still pending well after their pool is up lost it to other
			// pods (the scheduler binds whichever fits first): they ask
			// again, as unschedulable pods do.
			if p := a.pools[pool]; p != nil && (!p.ready || time.Since(p.readyAt) < 2*time.Second) {
				continue
			}
		}
		ask := asks[g]
		hosts, err := hostsOf(ask)
		if err != nil {
			a.event(ctx, pods, corev1.EventTypeWarning, "FailedScaleUp", "Node scale up associated with this pod failed: "+err.Error())
			continue
		}
		chips := hosts * ask.chipsPerHost
		if max, capped := a.opts.Quota[ask.accel]; capped {
			used := 0
			for _, p := range a.pools {
				if p.accel == ask.accel {
					used += p.chips
				}
			}
			if used+chips > max {
				if time.Since(a.warned[g]) > 2*time.Second {
					a.warned[g] = time.Now()
					a.note("quota %s: want %d chips, %d of %d in use", ask.accel, chips, used, max)
					a.event(ctx, pods, corev1.EventTypeWarning, "FailedScaleUp",
						fmt.Sprintf("Node scale up in zones us-central2-b associated with this pod failed: GCE quota exceeded. Pod is at risk of not being scheduled. (TPU quota for %s: %d chips, %d in use, %d more asked)", ask.accel, max, used, chips))
				}
				continue
			}
		}
		a.next++
		name := fmt.Sprintf("autoscaled-%d", a.next)
		p := &scaledPool{name: name, accel: ask.accel, chips: chips, triggered: time.Now()}
		for _, pod := range pods {
			p.podLabels = append(p.podLabels, maps.Clone(pod.Labels))
		}
		a.pools[name] = p
		a.groups[g] = name
		a.note("scale-up %s %s %s: %d nodes", name, ask.accel, ask.topology, hosts)
		a.event(ctx, pods, corev1.EventTypeNormal, "TriggeredScaleUp",
			fmt.Sprintf("pod triggered scale-up: [{%s 0->%d (max: %d)}]", name, hosts, hosts))
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.create(ctx, p, ask, hosts)
		}()
	}
}

// hostsOf is the number of hosts of ask's slice.
func hostsOf(ask tpuAsk) (int, error) {
	chips := 1
	for _, s := range strings.Split(ask.topology, "x") {
		d, err := strconv.Atoi(s)
		if err != nil || d < 1 {
			return 0, fmt.Errorf("topology %q is not a TPU topology", ask.topology)
		}
		chips *= d
	}
	if chips%ask.chipsPerHost != 0 {
		return 0, fmt.Errorf("topology %s has %d chips, not a multiple of %d per host", ask.topology, chips, ask.chipsPerHost)
	}
	return chips / ask.chipsPerHost, nil
}

func (a *Autoscaler) create(ctx context.Context, p *scaledPool, ask tpuAsk, hosts int) {
	a.createLabelled(ctx, p, ask, hosts, nil)
}

// createLabelled makes pool p's nodes after Delay, with extra node labels.
func (a *Autoscaler) createLabelled(ctx context.Context, p *scaledPool, ask tpuAsk, hosts int, extra map[string]string) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(a.opts.Delay):
	}
	labels := maps.Clone(extra)
	if labels == nil {
		labels = map[string]string{}
	}
	taints := []corev1.Taint{TPUTaint}
	if ask.spot {
		// GKE labels Spot nodes; it taints them only when asked.
		labels["cloud.google.com/gke-spot"] = "true"
	}
	nodes, err := a.cp.AddTPUNodePool(ctx, NodePool{
		Name: p.name, Generation: ask.accel, Topology: ask.topology, ChipsPerHost: ask.chipsPerHost,
		Hosts: hosts, Kwok: a.opts.Kwok, Labels: labels, Taints: taints,
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.note("scale-up %s failed: %v", p.name, err)
		delete(a.pools, p.name)
		return
	}
	for _, n := range nodes {
		p.nodes = append(p.nodes, n.Name)
	}
	p.ready, p.readyAt = true, time.Now()
	a.ups = append(a.ups, ScaleUp{Pool: p.name, Triggered: p.triggered, Ready: p.readyAt, PodLabels: p.podLabels})
}

// ScaleUp is one scale-up the autoscaler made: when pending pods
// triggered it and when the pool's nodes were all created.
type ScaleUp struct {
	Pool             string
	Triggered, Ready time.Time
	// PodLabels are the labels of the pending pods that triggered it.
	PodLabels []map[string]string
}

// ScaleUps lists its finished scale-ups, in order.
func (a *Autoscaler) ScaleUps() []ScaleUp {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ups)
}

func (a *Autoscaler) scaleDown(ctx context.Context) {
	a.mu.Lock()
	var ready []*scaledPool
	for _, p := range a.pools {
		if p.ready {
			ready = append(ready, p)
		}
	}
	a.mu.Unlock()
	for _, p := range ready {
		busy := false
		for _, n := range p.nodes {
			pods, err := a.cp.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
			if err != nil {
				busy = true
				break
			}
			for _, pod := range pods.Items {
				if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
					busy = true
				}
			}
		}
		a.mu.Lock()
		switch {
		case busy:
			p.emptySince = time.Time{}
		case p.emptySince.IsZero():
			p.emptySince = time.Now()
		case time.Since(p.emptySince) >= a.opts.ScaleDownAfter && a.pools[p.name] == p:
			delete(a.pools, p.name)
			a.note("scale-down %s", p.name)
			a.mu.Unlock()
			_ = a.deleteNodes(ctx, p)
			continue
		}
		a.mu.Unlock()
	}
}

func (a *Autoscaler) deleteNodes(ctx context.Context, p *scaledPool) error {
	var errs []error
	for _, n := range p.nodes {
		err := a.cp.client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete pool %s: %v", p.name, errs)
	}
	return nil
}

// event records an event on each pod, as the autoscaler does. a.mu is
// held; the API calls are short.
func (a *Autoscaler) event(ctx context.Context, pods []*corev1.Pod, typ, reason, msg string) {
	now := metav1.NewTime(time.Now())
	for _, p := range pods {
		_, _ = a.cp.client.CoreV1().Events(p.Namespace).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: p.Name + ".", Namespace: p.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			Reason:         reason, Message: msg, Type: typ,
			Source:         corev1.EventSource{Component: "cluster-autoscaler"},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}, metav1.CreateOptions{})
	}
}
