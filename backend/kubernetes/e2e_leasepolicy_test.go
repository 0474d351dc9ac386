//go:build e2e

package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/backend/kubernetes/deploy"
	"github.com/goray-dev/goray/internal/kubeharness"
)

// applyLeasePolicy creates deploy/lease-policy.yaml's objects.
func applyLeasePolicy(t *testing.T, cp *kubeharness.ControlPlane) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(deploy.LeasePolicy), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		res := map[string]string{"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[gvk.Kind]
		gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: res}
		if _, err := dyn.Resource(gvr).Create(t.Context(), &u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// as returns a client that acts as user (impersonated by the admin; in
// system:masters, so RBAC allows it and only the policy decides).
func as(t *testing.T, cp *kubeharness.ControlPlane, user string) k8s.Interface {
	t.Helper()
	rc := rest.CopyConfig(cp.Config())
	rc.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	c, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestE2ELeasePolicy runs deploy/lease-policy.yaml on the harness's API
// server: a driver claims, renews and releases its own slice Leases
// through the backend's Leases as before, but another driver's update or
// delete of a live Lease, or a Lease written in someone else's name, is
// refused with a message saying why; a Lease that had expired is taken
// over.
func TestE2ELeasePolicy(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil) // skips unless GORAY_E2E=1
	ctx := t.Context()
	applyLeasePolicy(t, cp)
	const userA, userB = "system:serviceaccount:default:driver-a", "system:serviceaccount:default:driver-b"
	leases := func(user, identity string) *Leases {
		cfg := testConfig()
		cfg.Identity = identity
		cfg.Lease.Duration = 5 * time.Second
		l, err := NewLeases(as(t, cp, user), cfg)
		is.NoErr(err)
		l.cluster = identity
		return l
	}
	a := leases(userA, userA+"/host-a")
	is.NoErr(a.Claim(ctx, "pg-a", []string{"s1"})) // its own Lease: allowed
	a.RenewAll(ctx)
	is.Equal(a.Held(), []string{"s1"})

	// The policy takes a moment to be enforced: wait until B's update of
	// A's live Lease is refused.
	clientB := as(t, cp, userB)
	var denied error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		cur, err := clientB.CoordinationV1().Leases("default").Get(ctx, LeaseName("s1"), metav1.GetOptions{})
		is.NoErr(err)
		steal := cur.DeepCopy()
		holder := userB + "/host-b"
		steal.Spec.HolderIdentity = &holder
		now := metav1.NewMicroTime(time.Now())
		steal.Spec.AcquireTime = &now
		_, err = clientB.CoordinationV1().Leases("default").Update(ctx, steal, metav1.UpdateOptions{})
		if err != nil {
			denied = err
			break
		}
		// Not enforced yet: give the Lease back to A for the next try.
		back := cur.DeepCopy()
		back.ResourceVersion = ""
		is.NoErr(clientB.CoordinationV1().Leases("default").Delete(ctx, cur.Name, metav1.DeleteOptions{}))
		_, err = as(t, cp, userA).CoordinationV1().Leases("default").Create(ctx, back, metav1.CreateOptions{})
		is.NoErr(err)
		time.Sleep(200 * time.Millisecond) // the policy's activation has no event to wait on
	}
	if denied == nil {
		t.Fatal("the policy never refused another driver's update of a live Lease")
	}
	is.True(apierrors.IsForbidden(denied) || apierrors.IsInvalid(denied))
	is.True(strings.Contains(denied.Error(), `is held by "`+userA+`/host-a": only its holder may change it before it expires`))
	a.RenewAll(ctx) // A renews the Lease it still holds
	is.Equal(a.Held(), []string{"s1"})

	err := clientB.CoordinationV1().Leases("default").Delete(ctx, LeaseName("s1"), metav1.DeleteOptions{})
	is.True(err != nil && strings.Contains(err.Error(), "only its holder may delete it"))

	other := userA + "/forged"
	forged := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName("s2"), Labels: map[string]string{labelManagedBy: managedBy}},
		Spec: coordv1.LeaseSpec{HolderIdentity: &other}}
	_, err = clientB.CoordinationV1().Leases("default").Create(ctx, forged, metav1.CreateOptions{})
	is.True(err != nil && strings.Contains(err.Error(), "only in its own name"))

	// A stops renewing (it died); once its Lease has expired, B's
	// takeover carries an acquireTime past the expiry and is allowed.
	b := leases(userB, userB+"/host-b")
	b.now = func() time.Time { return time.Now().Add(10 * time.Second) }
	is.NoErr(b.Claim(ctx, "pg-b", []string{"s1"}))
	is.Equal(b.Held(), []string{"s1"})
	is.NoErr(b.Release(ctx, []string{"s1"}))
}
