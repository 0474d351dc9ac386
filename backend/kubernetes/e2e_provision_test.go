//go:build e2e

package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// startAutoscaledHarness starts a control plane with no TPU nodes and the
// harness's GKE-like autoscaler; capacity pods (DefaultCapacityImage) run
// as a sleeping process.
func startAutoscaledHarness(t *testing.T, opts kubeharness.AutoscalerOptions) (*kubeharness.ControlPlane, *kubeharness.Autoscaler) {
	t.Helper()
	exe, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	pause := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pause, []byte("#!/bin/sh\nexec sleep infinity\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp := kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{workerImage: exe, DefaultCapacityImage: pause}})
	return cp, cp.StartAutoscaler(t, opts)
}

func provisioningDriver(t *testing.T, rc *rest.Config, identity string) *Backend {
	t.Helper()
	b, _ := provisioningCluster(t, rc, identity, ProvisionConfig{Mode: ProvisionPods})
	return b
}

func provisioningCluster(t *testing.T, rc *rest.Config, identity string, prov ProvisionConfig) (*Backend, *ray.Cluster) {
	t.Helper()
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Identity = identity
	cfg.Client = client
	cfg.Worker.Image = workerImage
	cfg.Worker.StartTimeout = time.Minute
	cfg.Provision = prov
	b, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(t.Context(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return b, c
}

// From zero TPU nodes: a v6e 4x4 reservation makes capacity pods, the
// autoscaler brings up a whole pool for them, the reservation gets that
// slice with its worker pods in place of the capacity pods, and once it is
// released nothing is left on the nodes, so the pool is scaled away.
func TestE2EProvisionFromZero(t *testing.T) {
	is := is.New(t)
	cp, as := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{ScaleDownAfter: time.Second})
	b := provisioningDriver(t, driverConfig(t, cp), "driver-a")
	ctx := t.Context()
	admin := cp.Client()
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	is.NoErr(err)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := b.ReserveSlices(rctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "fresh"})
	is.NoErr(err)
	t.Logf("reserved a provisioned v6e 4x4 in %v; autoscaler: %v", time.Since(t0), as.Events())
	is.Equal(as.Pools(), []string{"autoscaled-1"})
	is.Equal(res.Slices[0].Name, "autoscaled-1")
	is.Equal(len(reservationPods(t, admin, res.Group)), 4)
	capacity, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(capacity.Items), 0) // replaced by the worker pods

	is.NoErr(b.RemovePlacementGroup(ctx, res.Group))
	deadline := time.Now().Add(30 * time.Second)
	for len(as.Pools()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	is.Equal(len(as.Pools()), 0) // scaled to zero: release left nothing on the nodes
	is.NoErr(b.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// Two slices with quota for one: nothing is held, the error says what was
// asked and that the quota ran out, and no capacity pod is left.
func TestE2EProvisionQuota(t *testing.T) {
	is := is.New(t)
	cp, _ := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{Quota: map[string]int{"tpu-v6e-slice": 16}})
	b := provisioningDriver(t, driverConfig(t, cp), "driver-a")
	ctx := t.Context()
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	is.NoErr(err)
	rctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	_, err = b.ReserveSlices(rctx, &backend.SliceRequest{Shape: shape, NumSlices: 2, Name: "two"})
	is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)
	t.Log(err)
	is.True(strings.Contains(err.Error(), "asked the cluster for 1 new slice") || strings.Contains(err.Error(), "asked the cluster for 2 new slices"))
	is.True(strings.Contains(err.Error(), "GCE quota exceeded"))
	capacity, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(capacity.Items), 0)
	is.NoErr(b.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// Two drivers asking at once each get a pool of their own; cancelling a
// reservation while its capacity is being provisioned leaves no capacity
// pod behind.
func TestE2EProvisionTwoDriversAndCancel(t *testing.T) {
	is := is.New(t)
	cp, as := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{Delay: time.Second})
	rc := driverConfig(t, cp)
	a := provisioningDriver(t, rc, "driver-a")
	b := provisioningDriver(t, rc, "driver-b")
	ctx := t.Context()
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x4", 0)
	is.NoErr(err)

	// Cancel mid-provisioning.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = a.ReserveSlices(cctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "cancelled"})
	cancel()
	is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)
	capacity, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	is.Equal(len(capacity.Items), 0)

	type result struct {
		res *backend.SliceReservation
		err error
	}
	// Where each driver's capacity pods were bound, from a watch.
	w, err := cp.Client().CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: labelCapacity})
	is.NoErr(err)
	defer w.Stop()
	var bmu sync.Mutex
	boundTo := map[string]string{} // node → cluster ID of the capacity pod bound there
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				bmu.Lock()
				boundTo[p.Spec.NodeName] = p.Labels[LabelCluster]
				bmu.Unlock()
			}
		}
	}()
	got := make([]chan result, 2)
	drivers := []*Backend{a, b}
	for i, d := range drivers {
		got[i] = make(chan result, 1)
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			res, err := d.ReserveSlices(rctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "race"})
			got[i] <- result{res, err}
		}()
	}
	var pools []string
	for i, d := range drivers {
		r := <-got[i]
		is.NoErr(r.err)
		pool := r.res.Slices[0].Name
		pools = append(pools, pool)
		// Each driver got a pool its own capacity pods were bound to.
		bmu.Lock()
		owner := boundTo[r.res.Slices[0].Hosts[0]]
		bmu.Unlock()
		is.Equal(owner, string(d.ClusterID()))
	}
	t.Logf("autoscaler: %v; pools %v", as.Events(), pools)
	is.True(pools[0] != pools[1]) // a pool each
	is.NoErr(a.Close())
	is.NoErr(b.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// A Spot slice: the capacity pods ask for Spot VMs, the autoscaler makes a
// Spot pool, and when it preempts the pool (deletes its nodes) the work on
// the slice fails with Unavailable at once; a new reservation gets new
// Spot capacity.
func TestE2EProvisionSpotPreemption(t *testing.T) {
	is := is.New(t)
	cp, as := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{})
	_, c := provisioningCluster(t, driverConfig(t, cp), "driver-a", ProvisionConfig{Mode: ProvisionPods, Spot: true})
	ctx := t.Context()
	spec := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Timeout: 2 * time.Minute}
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	is.NoErr(err)
	pool := spg.Slices()[0].Name
	hosts := spg.Slices()[0].Hosts
	node, err := cp.Client().CoreV1().Nodes().Get(ctx, hosts[0], metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(node.Labels["cloud.google.com/gke-spot"], "true") // a Spot pool, as asked

	done := make(chan error, 1)
	go func() { _, err := ray.RunOnSlice[struct{}, string](ctx, spg, slowTask, struct{}{}); done <- err }()
	is.NoErr(wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return false, err
		}
		running := 0
		for _, n := range snap.Nodes {
			running += n.Running
		}
		return running == 4, nil
	}))
	t0 := time.Now()
	is.NoErr(as.Preempt(ctx, pool))
	select {
	case err := <-done:
		is.Equal(ray.Code(err), ray.Unavailable)
		t.Logf("work on the preempted slice failed after %v: %v", time.Since(t0), err)
		is.True(time.Since(t0) < 15*time.Second)
	case <-time.After(time.Minute):
		t.Fatal("the work on the preempted slice did not fail")
	}
	is.NoErr(spg.Release(ctx))

	spg2, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	is.NoErr(err)
	is.True(spg2.Slices()[0].Name != pool) // new capacity
	is.NoErr(spg2.Release(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
