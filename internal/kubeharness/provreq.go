//go:build e2e

package kubeharness

import (
	"bytes"
	"context"
	_ "embed"
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
		sets, _, _ := unstructured.NestedSlice(pr.Object, "spec", "podSets")
		if len(sets) != 1 {
			a.setCondition(ctx, pr, "Failed", "True", "NotSupported", "the harness serves requests of one pod set")
			a.mark(key, "failed")
			continue
		}
		set, _ := sets[0].(map[string]any)
		count, _, _ := unstructured.NestedInt64(set, "count")
		tmplName, _, _ := unstructured.NestedString(set, "podTemplateRef", "name")
		tmpl, err := a.cp.client.CoreV1().PodTemplates(pr.GetNamespace()).Get(ctx, tmplName, metav1.GetOptions{})
		if err != nil {
			a.setCondition(ctx, pr, "Failed", "True", "PodTemplateNotFound", err.Error())
			a.mark(key, "failed")
			continue
		}
		ask, ok := askOf(&corev1.Pod{Spec: tmpl.Template.Spec})
		hosts, herr := hostsOf(ask)
		if !ok || herr != nil || int(count)%hosts != 0 {
			msg := fmt.Sprintf("pod template %s asks for no TPU slice, or %d pods are not whole slices", tmplName, count)
			if herr != nil {
				msg = herr.Error()
			}
			a.setCondition(ctx, pr, "Failed", "True", "NotProvisionable", msg)
			a.mark(key, "failed")
			continue
		}
		slices := int(count) / hosts
		chips := slices * hosts * ask.chipsPerHost
		a.mu.Lock()
		if max, capped := a.opts.Quota[ask.accel]; capped {
			used := 0
			for _, p := range a.pools {
				if p.accel == ask.accel {
					used += p.chips
				}
			}
			if used+chips > max {
				first := state != "quota"
				a.provReqs[key] = "quota"
				if first {
					a.note("provreq %s quota %s: want %d chips, %d of %d in use", key, ask.accel, chips, used, max)
				}
				a.mu.Unlock()
				if first {
					a.setCondition(ctx, pr, "Accepted", "True", "Accepted", "Provisioning Request was accepted.")
					a.setCondition(ctx, pr, "Provisioned", "False", "QuotaExceeded",
						fmt.Sprintf("Provisioning Request's capacity cannot be provisioned: GCE quota exceeded (TPU quota for %s: %d chips, %d in use, %d asked by %d × %s). It stays queued (class %s).", ask.accel, max, used, chips, slices, ask.topology, class))
				}
				continue
			}
		}
		a.provReqs[key] = "provisioning"
		var made []*scaledPool
		for range slices {
			a.next++
			p := &scaledPool{name: fmt.Sprintf("autoscaled-%d", a.next), accel: ask.accel, chips: hosts * ask.chipsPerHost, triggered: time.Now()}
			a.pools[p.name] = p
			made = append(made, p)
		}
		names := make([]string, len(made))
		for i, p := range made {
			names[i] = p.name
		}
		a.note("provreq %s: scale-up %s %s %s: %d × %d nodes at once", key, strings.Join(names, ","), ask.accel, ask.topology, slices, hosts)
		a.mu.Unlock()
		a.setCondition(ctx, pr, "Accepted", "True", "Accepted", "Provisioning Request was accepted.")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var iwg sync.WaitGroup
			for _, p := range made {
				iwg.Go(func() { a.create(ctx, p, ask, hosts) })
			}
			iwg.Wait()
			a.mu.Lock()
			ok := true
			for _, p := range made {
				ok = ok && p.ready
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
