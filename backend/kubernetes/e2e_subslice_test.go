//go:build e2e

package kubernetes

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// TestE2ESubsliceClaims runs two drivers (two backends, each with its own
// Lease identity) on one v6e 4x4 of a real control plane. Driver a
// reserves a 2x4 sub-slice: the runtime claims the slice's Lease in shared
// mode and starts one worker pod per host of the sub-slice, requesting
// google.com/tpu, with the sub-slice's env. Driver b's whole-slice request
// is refused as held (HeldError) and retried, and gets the slice once a
// releases its sub-slice. Nothing is left at the end.
func TestE2ESubsliceClaims(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "4x4", ChipsPerHost: 4})
	is.NoErr(err)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	admin := cp.Client()

	newDriver := func(identity string) *Backend {
		cfg := testConfig()
		cfg.Identity = identity
		cfg.Client = client
		cfg.Worker.Image = workerImage
		cfg.Worker.StartTimeout = time.Minute
		b, err := New(ctx, cfg)
		is.NoErr(err)
		c, err := ray.NewCluster(ctx, b, nil)
		is.NoErr(err)
		t.Cleanup(func() { _ = c.Close() })
		return b
	}
	a, b := newDriver("driver-a"), newDriver("driver-b")
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	is.NoErr(err)

	// a reserves a sub-slice: the Lease is a's, shared mode.
	sub, err := a.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape, Subslice: "2x4", Name: "sub"})
	is.NoErr(err)
	rs := sub.Slices[0]
	is.Equal(rs.Name, "slice-a")
	is.Equal(len(rs.Hosts), 2)
	lease, err := admin.CoordinationV1().Leases("default").Get(ctx, LeaseName("slice-a"), metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(*lease.Spec.HolderIdentity, "driver-a")
	is.Equal(lease.Annotations[annotationClaim], subsliceClaim)

	// One worker pod per host of the sub-slice, on its node, with its
	// chips and the sub-slice's env.
	pods := reservationPods(t, admin, sub.Group)
	is.Equal(len(pods), 2)
	for _, p := range pods {
		wid := p.Labels[LabelWorkerID]
		is.True(wid == "0" || wid == "1")
		is.Equal(p.Spec.NodeName, rs.Hosts[wid[0]-'0']) // scheduled onto its host, in sub-slice worker order
		c := p.Spec.Containers[0]
		is.Equal(c.Resources.Limits.Name(resourceTPU, "").Value(), int64(4))
		is.Equal(c.Resources.Requests.Name(resourceTPU, "").Value(), int64(4))
		is.Equal(envOf(c, tpu.EnvWorkerID), wid)
		is.Equal(envOf(c, tpu.EnvName), rs.SubsliceID) // a slice of its own
	}

	// b's whole slice is held by a: refused until its deadline.
	whole := &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "whole"}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = b.ReserveSlices(short, whole)
	is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)

	// b waits and retries; it gets the slice once a releases.
	type result struct {
		res *backend.SliceReservation
		err error
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := b.ReserveSlices(wctx, whole)
		got <- result{res, err}
	}()
	t0 := time.Now()
	is.NoErr(a.RemovePlacementGroup(ctx, sub.Group))
	r := <-got
	is.NoErr(r.err)
	t.Logf("b got the whole slice %v after a released its sub-slice", time.Since(t0))
	is.Equal(r.res.Slices[0].Name, "slice-a")
	is.Equal(len(reservationPods(t, admin, r.res.Group)), 4)
	lease, err = admin.CoordinationV1().Leases("default").Get(ctx, LeaseName("slice-a"), metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(*lease.Spec.HolderIdentity, "driver-b")
	is.NoErr(b.RemovePlacementGroup(ctx, r.res.Group))

	is.NoErr(a.Close())
	is.NoErr(b.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
	_, err = admin.CoordinationV1().Leases("default").Get(ctx, LeaseName("slice-a"), metav1.GetOptions{})
	is.True(err != nil) // no Lease left
}

// reservationPods returns the worker pods of a reservation.
func reservationPods(t *testing.T, client k8s.Interface, group backend.PlacementGroupID) []corev1.Pod {
	t.Helper()
	list, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: LabelReservation + "=" + labelValue(group.String())})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(list.Items)
}

// envOf returns the literal value of a container's env variable.
func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
