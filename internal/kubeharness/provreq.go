//go:build e2e

package kubeharness

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// The ProvisioningRequest side of the autoscaler (AutoscalerOptions.
// ProvisioningRequests), after the cluster autoscaler's provisioning
// request support: a request names a PodTemplate and a pod count; the
// capacity is granted all at once (best-effort-atomic-scale-up, GKE's
// queued-provisioning.gke.io) and marked with the Provisioned condition.

//go:embed crd/provisioningrequests.yaml
var provisioningRequestCRD []byte

// annotationConsumeProvReq marks a pod that consumes a ProvisioningRequest.
const annotationConsumeProvReq = "autoscaling.x-k8s.io/consume-provisioning-request"

var (
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	provReqGVR = schema.GroupVersionResource{Group: "autoscaling.x-k8s.io", Version: "v1", Resource: "provisioningrequests"}
)

// installProvisioningRequestCRD creates the CRD and waits until it is
// served.
func installProvisioningRequestCRD(ctx context.Context, cp *ControlPlane) (dynamic.Interface, error) {
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return nil, err
	}
	var u unstructured.Unstructured
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(provisioningRequestCRD), 4096).Decode(&u.Object); err != nil {
		return nil, fmt.Errorf("decode the ProvisioningRequest CRD: %w", err)
	}
	if _, err := dyn.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create the ProvisioningRequest CRD: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(provReqGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the ProvisioningRequest CRD is not served: %w", err)
	}
	return dyn, nil
}

// serveRequests looks at every ProvisioningRequest once: it provisions all
// its pools at once, or marks it as waiting for quota and looks again.
func (a *Autoscaler) serveRequests(ctx context.Context, wg *sync.WaitGroup) {
	list, err := a.dyn.Resource(provReqGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		pr := &list.Items[i]
		key := pr.GetNamespace() + "/" + pr.GetName()
		a.mu.Lock()
		state := a.provReqs[key]
		a.mu.Unlock()
		if state == "provisioning" || state == "provisioned" || state == "failed" {
			continue
		}
		class, _, _ := unstructured.NestedString(pr.Object, "spec", "provisioningClassName")
		a.mu.Lock()
		f := a.failNext
		a.mu.Unlock()
		if f != nil {
			a.setCondition(ctx, pr, "Failed", "True", f.reason, f.message)
			a.mark(key, "failed")
			a.mu.Lock()
			a.note("provreq %s failed: %s", key, f.reason)
			a.mu.Unlock()
			continue
		}
		// One pod set per slice shape asked (goray's own requests), or one
		// per Kueue pod set (Kueue's admission check: a set per role of
		// the workload's pods); each set's count is whole slices.
		sets, _, _ := unstructured.NestedSlice(pr.Object, "spec", "podSets")
		type setAsk struct {
			ask          tpuAsk
			hosts, count int
			labels       map[string]string
		}
		var asks []setAsk
		var bad string
		for _, x := range sets {
			set, _ := x.(map[string]any)
			count, _, _ := unstructured.NestedInt64(set, "count")
			tmplName, _, _ := unstructured.NestedString(set, "podTemplateRef", "name")
			tmpl, err := a.cp.client.CoreV1().PodTemplates(pr.GetNamespace()).Get(ctx, tmplName, metav1.GetOptions{})
			if err != nil {
				a.setCondition(ctx, pr, "Failed", "True", "PodTemplateNotFound", err.Error())
				bad = "failed"
				break
			}
			ask, ok := askOf(&corev1.Pod{Spec: tmpl.Template.Spec})
			hosts, herr := hostsOf(ask)
			if !ok || herr != nil || int(count)%hosts != 0 {
				msg := fmt.Sprintf("pod template %s asks for no TPU slice, or %d pods are not whole slices", tmplName, count)
				if herr != nil {
					msg = herr.Error()
				}
				a.setCondition(ctx, pr, "Failed", "True", "NotProvisionable", msg)
				bad = "failed"
				break
			}
			// The new nodes carry what the pods select beyond the TPU
			// labels (a Kueue flavor's node labels, flex-start, ...), as
			// the node pools GKE makes for them do.
			labels := map[string]string{}
			for k, v := range tmpl.Template.Spec.NodeSelector {
				if k != LabelTPUAccelerator && k != LabelTPUTopology {
					labels[k] = v
				}
			}
			asks = append(asks, setAsk{ask: ask, hosts: hosts, count: int(count), labels: labels})
		}
		if len(sets) == 0 && bad == "" {
			a.setCondition(ctx, pr, "Failed", "True", "NotProvisionable", "the request has no pod sets")
			bad = "failed"
		}
		if bad != "" {
			a.mark(key, bad)
			continue
		}
		want := map[string]int{} // chips by accelerator
		for _, s := range asks {
			want[s.ask.accel] += s.count * s.ask.chipsPerHost
		}
		a.mu.Lock()
		over := ""
		for accel, chips := range want {
			max, capped := a.opts.Quota[accel]
			if !capped {
				continue
			}
			used := 0
			for _, p := range a.pools {
				if p.accel == accel {
					used += p.chips
				}
			}
			if used+chips > max {
				over = fmt.Sprintf("TPU quota for %s: %d chips, %d in use, %d asked", accel, max, used, chips)
			}
		}
		if over != "" {
			first := state != "quota"
			a.provReqs[key] = "quota"
			if first {
				a.note("provreq %s quota: %s", key, over)
			}
			a.mu.Unlock()
			if first {
				a.setCondition(ctx, pr, "Accepted", "True", "Accepted", "Provisioning Request was accepted.")
				a.setCondition(ctx, pr, "Provisioned", "False", "QuotaExceeded",
					fmt.Sprintf("Provisioning Request's capacity cannot be provisioned: GCE quota exceeded (%s). It stays queued (class %s).", over, class))
			}
			continue
		}
		a.provReqs[key] = "provisioning"
		type made struct {
			pool   *scaledPool
			ask    tpuAsk
			hosts  int
			labels map[string]string
		}
		var pools []made
		var names []string
		var shapes []string
		for _, s := range asks {
			for range s.count / s.hosts {
				a.next++
				p := &scaledPool{name: fmt.Sprintf("autoscaled-%d", a.next), accel: s.ask.accel, chips: s.hosts * s.ask.chipsPerHost, triggered: time.Now(), provReq: key}
				a.pools[p.name] = p
				pools = append(pools, made{p, s.ask, s.hosts, s.labels})
				names = append(names, p.name)
				shapes = append(shapes, fmt.Sprintf("%s %s (%d nodes)", s.ask.accel, s.ask.topology, s.hosts))
			}
		}
		a.note("provreq %s: scale-up %s: %s at once", key, strings.Join(names, ","), strings.Join(shapes, ", "))
		a.mu.Unlock()
		a.setCondition(ctx, pr, "Accepted", "True", "Accepted", "Provisioning Request was accepted.")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var iwg sync.WaitGroup
			for _, m := range pools {
				iwg.Go(func() { a.createLabelled(ctx, m.pool, m.ask, m.hosts, m.labels) })
			}
			iwg.Wait()
			a.mu.Lock()
			ok := true
			for _, m := range pools {
				ok = ok && m.pool.ready
			}
			a.mu.Unlock()
			if !ok || ctx.Err() != nil {
				return
			}
			a.mark(key, "provisioned")
			if cur, err := a.dyn.Resource(provReqGVR).Namespace(pr.GetNamespace()).Get(ctx, pr.GetName(), metav1.GetOptions{}); err == nil {
				a.setCondition(ctx, cur, "Provisioned", "True", "Provisioned", "Provisioning Request was successfully provisioned.")
			}
		}()
	}
}

func (a *Autoscaler) mark(key, state string) {
	a.mu.Lock()
	a.provReqs[key] = state
	a.mu.Unlock()
}

// setCondition sets one status condition of a ProvisioningRequest.
func (a *Autoscaler) setCondition(ctx context.Context, pr *unstructured.Unstructured, typ, status, reason, msg string) {
	for range 5 {
		cur, err := a.dyn.Resource(provReqGVR).Namespace(pr.GetNamespace()).Get(ctx, pr.GetName(), metav1.GetOptions{})
		if err != nil {
			return
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		c := map[string]any{"type": typ, "status": status, "reason": reason, "message": msg,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
		replaced := false
		for i, x := range conds {
			if m, ok := x.(map[string]any); ok && m["type"] == typ {
				conds[i], replaced = c, true
			}
		}
		if !replaced {
			conds = append(conds, c)
		}
		if err := unstructured.SetNestedSlice(cur.Object, conds, "status", "conditions"); err != nil {
			return
		}
		_, err = a.dyn.Resource(provReqGVR).Namespace(pr.GetNamespace()).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return
		}
	}
}

// provFailure is how FailProvisioningRequests fails requests.
type provFailure struct{ reason, message string }

// FailProvisioningRequests makes the autoscaler fail every
// ProvisioningRequest it has not served yet, now and from now on, with
// condition Failed=True and reason and message (as the cluster autoscaler
// does when it cannot provision a request: out of stock, no such machine
// type, ...). An empty reason turns it off again.
func (a *Autoscaler) FailProvisioningRequests(reason, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if reason == "" {
		a.failNext = nil
		a.note("provreq failures off")
		return
	}
	a.failNext = &provFailure{reason, message}
	a.note("provreq failures on: %s", reason)
}

// RevokeCapacity takes a provisioned ProvisioningRequest's capacity away,
// as GKE does when a flex-start booking ends: it marks the request
// CapacityRevoked=True with message and deletes the nodes of every pool
// made for it.
func (a *Autoscaler) RevokeCapacity(ctx context.Context, namespace, name, message string) error {
	if a.dyn == nil {
		return fmt.Errorf("revoke %s/%s: the autoscaler serves no ProvisioningRequests (AutoscalerOptions.ProvisioningRequests)", namespace, name)
	}
	key := namespace + "/" + name
	pr, err := a.dyn.Resource(provReqGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("revoke %s: %w", key, err)
	}
	a.setCondition(ctx, pr, "CapacityRevoked", "True", "CapacityRevoked", message)
	a.mu.Lock()
	var pools []*scaledPool
	for n, p := range a.pools {
		if p.provReq == key {
			pools = append(pools, p)
			delete(a.pools, n)
		}
	}
	a.note("provreq %s capacity revoked: %d pools", key, len(pools))
	a.mu.Unlock()
	var errs []error
	for _, p := range pools {
		if err := a.deleteNodes(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
