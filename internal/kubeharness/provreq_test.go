//go:build e2e

package kubeharness_test

import (
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// TestProvisioningRequestCRD checks that the API server, serving the
// harness's ProvisioningRequest CRD, takes and refuses what it would with
// the cluster autoscaler's own CRD (cluster-autoscaler/apis/config/crd/
// autoscaling.x-k8s.io_provisioningrequests.yaml): a request with a class
// and a pod set is taken; a class name that is no DNS subdomain, a pod
// count below 1, a request without pod sets or more than 32 of them are
// refused; once created, its spec cannot change.
func TestProvisioningRequestCRD(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	cp.StartAutoscaler(t, kubeharness.AutoscalerOptions{ProvisioningRequests: true})
	ctx := ctxFor(t, time.Minute)
	dyn, err := dynamic.NewForConfig(cp.Config())
	is.NoErr(err)
	prs := dyn.Resource(schema.GroupVersionResource{Group: "autoscaling.x-k8s.io", Version: "v1", Resource: "provisioningrequests"}).Namespace("default")

	request := func(name, class string, counts ...int64) *unstructured.Unstructured {
		var sets []any
		for _, n := range counts {
			sets = append(sets, map[string]any{"count": n, "podTemplateRef": map[string]any{"name": "capacity"}})
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"provisioningClassName": class,
				"podSets":               sets,
				"parameters":            map[string]any{"ValidUntilSeconds": "600"},
			},
		}}
	}
	refused := func(pr *unstructured.Unstructured, want string) {
		t.Helper()
		_, err := prs.Create(ctx, pr, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("create %s: got %v, want Invalid saying %q", pr.GetName(), err, want)
		}
	}
	refused(request("bad-class", "Queued_Provisioning", 4), "spec.provisioningClassName")
	refused(request("zero-pods", "queued-provisioning.gke.io", 0), "spec.podSets[0].count")
	refused(request("no-sets", "queued-provisioning.gke.io"), "spec.podSets")
	many := make([]int64, 33)
	for i := range many {
		many[i] = 1
	}
	refused(request("many-sets", "queued-provisioning.gke.io", many...), "must have at most 32 items")

	created, err := prs.Create(ctx, request("good", "queued-provisioning.gke.io", 4, 4), metav1.CreateOptions{})
	is.NoErr(err)
	for _, field := range []struct {
		path  []string
		value any
	}{
		{[]string{"spec", "provisioningClassName"}, "best-effort-atomic-scale-up.autoscaling.x-k8s.io"},
		{[]string{"spec", "podSets"}, []any{map[string]any{"count": int64(8), "podTemplateRef": map[string]any{"name": "capacity"}}}},
		{[]string{"spec", "parameters"}, map[string]any{"ValidUntilSeconds": "60"}},
	} {
		// The autoscaler writes the request's status meanwhile: read again
		// on a conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pr, err := prs.Get(ctx, created.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := unstructured.SetNestedField(pr.Object, field.value, field.path...); err != nil {
				return err
			}
			_, err = prs.Update(ctx, pr, metav1.UpdateOptions{})
			return err
		})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Value is immutable") {
			t.Fatalf("update %s: got %v, want Invalid saying the value is immutable", strings.Join(field.path, "."), err)
		}
	}
	is.NoErr(prs.Delete(ctx, created.GetName(), metav1.DeleteOptions{}))
}
