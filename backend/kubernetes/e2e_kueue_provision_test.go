//go:build e2e

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// logLines is a log writer that keeps the lines and writes them to the
// test's log.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(b []byte) (int, error) {
	s := strings.TrimSpace(string(b))
	l.t.Log(s)
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	return len(b), nil
}

func (l *logLines) find(sub ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		all := true
		for _, x := range sub {
			all = all && strings.Contains(s, x)
		}
		if all {
			return s
		}
	}
	return ""
}

// TestE2EKueueProvisioningRequest: capacity on demand in the LocalQueue
// mode through Kueue's ProvisioningRequest admission check, set up as
// GKE's flex-start guide does (an AdmissionCheck of controllerName
// kueue.x-k8s.io/provisioning-request, a ProvisioningRequestConfig of
// class queued-provisioning.gke.io, a flavor without node labels), from
// zero TPU nodes, with the harness's autoscaler serving the requests.
//
//   - A v6e 2x4 reservation's capacity pods are one Kueue pod group; Kueue
//     reserves the quota, makes the ProvisioningRequest, the autoscaler
//     provisions the slice and marks it Provisioned, Kueue admits the
//     group and the reservation gets the new slice, its capacity pods
//     becoming its worker pods; meanwhile the driver logs that it waits
//     for Kueue's ProvisioningRequest.
//   - With the autoscaler failing requests, the next reservation fails at
//     once with ResourceExhausted saying Kueue rejected it and why.
//   - After release and Close nothing is left: no pod, Workload,
//     ProvisioningRequest, PodTemplate or Lease.
func TestE2EKueueProvisioningRequest(t *testing.T) {
	is := is.New(t)
	// The ProvisioningRequest CRD is served before Kueue starts, as Kueue
	// needs to run its admission check controller.
	cp, as := startAutoscaledHarness(t, kubeharness.AutoscalerOptions{ProvisioningRequests: true})
	ctx := t.Context()
	k, err := cp.StartKueue(ctx, nil)
	is.NoErr(err)
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "dws", LocalQueue: "dws",
		Flavors:      []kubeharness.KueueFlavor{{Name: "dws-flavor", TPU: 8}},
		Provisioning: &kubeharness.KueueProvisioning{}}))

	logs := &logLines{t: t}
	_, c := provisioningCluster(t, driverConfig(t, cp), "driver-a", ProvisionConfig{Mode: ProvisionRequest}, func(cfg *Config) {
		cfg.Kueue = KueueConfig{LocalQueue: "dws"}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})

	t0 := time.Now()
	spec := kueueSlice
	spec.Timeout = 90 * time.Second
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	is.NoErr(err)
	t.Logf("reserved a new v6e 2x4 through Kueue's ProvisioningRequest check in %v; autoscaler: %v",
		time.Since(t0).Round(time.Millisecond), as.Events())
	is.Equal(len(as.Pools()), 1) // the slice was made for it
	is.True(logs.find("capacity waits for Kueue", "ProvisioningRequest") != "")
	// Kueue made the request (it owns it) and the autoscaler granted it.
	prs, err := k.Dynamic().Resource(kubeharness.ProvisioningRequests).Namespace("default").List(ctx, metav1.ListOptions{})
	is.NoErr(err)
	is.Equal(len(prs.Items), 1)
	is.Equal(prs.Items[0].GetOwnerReferences()[0].Kind, "Workload")
	is.True(condIs(&prs.Items[0], "Provisioned", "True"))
	// The worker pods are the capacity pods Kueue admitted, on the new
	// pool, consuming the request.
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelReservation})
	is.NoErr(err)
	is.Equal(len(pods.Items), 2)
	for _, p := range pods.Items {
		is.True(strings.HasPrefix(p.Name, "goray-capacity"))
		is.Equal(p.Annotations[annotationConsumeProvReq], prs.Items[0].GetName())
		is.True(strings.HasPrefix(p.Spec.NodeName, as.Pools()[0]))
	}
	got, err := ray.RunOnSlice(ctx, spg, echoHost, 7)
	is.NoErr(err)
	is.Equal(got, []int{7, 7}) // on both hosts

	// The capacity revoked (as when a flex-start booking ends): the nodes
	// go, and the work on them fails with Unavailable, as on a lost slice.
	done := make(chan error, 1)
	go func() {
		_, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: filepath.Join(t.TempDir(), "never")})
		done <- err
	}()
	is.NoErr(waitRunning(ctx, c, 2))
	is.NoErr(as.RevokeCapacity(ctx, "default", prs.Items[0].GetName(), "the flex-start booking ended"))
	select {
	case err := <-done:
		t.Logf("capacity revoked: %v", err)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
	case <-time.After(time.Minute):
		t.Fatal("the work on revoked capacity did not fail")
	}
	is.NoErr(spg.Release(ctx))
	waitNothingOfKueueLeft(t, cp, k, false)

	// Failed requests: Kueue rejects the workload (its retry limit is 0
	// here), and the reservation fails at once saying why.
	as.FailProvisioningRequests("ResourcePoolExhausted", "no tpu-v6e-slice capacity in us-east5-b")
	t0 = time.Now()
	_, err = ray.NewSlicePlacementGroup(ctx, c, spec)
	took := time.Since(t0)
	t.Logf("failed provisioning (%v): %v", took.Round(time.Millisecond), err)
	is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
	is.True(strings.Contains(err.Error(), "Kueue rejected the capacity's workload"))
	is.True(strings.Contains(err.Error(), "no tpu-v6e-slice capacity in us-east5-b")) // the autoscaler's words
	is.True(took < 45*time.Second)                                                    // not the 90 s timeout
	waitNothingOfKueueLeft(t, cp, k, false)

	is.NoErr(c.Close())
	waitNothingOfKueueLeft(t, cp, k, true)
}

// echoHost returns its argument (a task run on a reserved host).
var echoHost = ray.NewTask("k8stest.kueue-provision-echo", func(ctx context.Context, n int) (int, error) { return n, nil })

func condIs(u *unstructured.Unstructured, typ, status string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ && m["status"] == status {
			return true
		}
	}
	return false
}

// waitNothingOfKueueLeft waits until no pod of a reservation, no capacity
// pod, no Workload, ProvisioningRequest or PodTemplate is left, and with
// leases no goray Lease either (a driver's handle Lease stays until it
// closes).
func waitNothingOfKueueLeft(t *testing.T, cp *kubeharness.ControlPlane, k *kubeharness.Kueue, leases bool) {
	t.Helper()
	ctx := t.Context()
	var left string
	t0, logged := time.Now(), time.Now()
	defer func() { t.Logf("nothing left after %v", time.Since(t0).Round(time.Millisecond)) }()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var parts []string
		sel := LabelReservation
		if leases {
			sel = LabelCluster
		}
		pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		capacity, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: labelCapacity})
		if err != nil {
			return false, err
		}
		if n := len(pods.Items) + len(capacity.Items); n > 0 {
			parts = append(parts, fmt.Sprintf("%d pods", n))
		}
		wls, err := k.Workloads(ctx, "default")
		if err != nil {
			return false, err
		}
		if len(wls) > 0 {
			parts = append(parts, fmt.Sprintf("%d Workloads", len(wls)))
		}
		prs, err := k.Dynamic().Resource(kubeharness.ProvisioningRequests).Namespace("default").List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err): // no ProvisioningRequest CRD here
		case err != nil:
			return false, err
		case len(prs.Items) > 0:
			parts = append(parts, fmt.Sprintf("%d ProvisioningRequests", len(prs.Items)))
		}
		pts, err := cp.Client().CoreV1().PodTemplates("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		if len(pts.Items) > 0 {
			parts = append(parts, fmt.Sprintf("%d PodTemplates", len(pts.Items)))
		}
		if leases {
			l, err := cp.Client().CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy})
			if err != nil {
				return false, err
			}
			if len(l.Items) > 0 {
				parts = append(parts, fmt.Sprintf("%d Leases", len(l.Items)))
			}
		} else {
			// The slice Leases go with the reservation.
			l, err := cp.Client().CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, x := range l.Items {
				if strings.HasPrefix(x.Name, "goray-slice-") {
					parts = append(parts, "Lease "+x.Name)
				}
			}
		}
		left = strings.Join(parts, ", ")
		if left != "" && time.Since(logged) > 2*time.Second {
			logged = time.Now()
			t.Logf("still left after %v: %s", time.Since(t0).Round(time.Millisecond), left)
		}
		return left == "", nil
	})
	if err != nil {
		t.Fatalf("left after release: %s (%v)", left, err)
	}
}

// TestE2EKueueTopologyAwareFlavor: the LocalQueue mode on a ClusterQueue
// whose flavor is topology-aware (Kueue's TAS, a Topology of the node pool,
// a slice, then the host): Kueue places each of goray's worker pods on the
// host goray pinned it to (its topology assignment agrees with the pod's
// node requirements), the reservation runs, and its Workload goes with it.
func TestE2EKueueTopologyAwareFlavor(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	k, err := cp.StartKueue(ctx, nil)
	is.NoErr(err)
	for _, name := range []string{"slice-a", "slice-b"} {
		_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: name, Generation: "v6e", Topology: "2x4", ChipsPerHost: 4,
			Labels: kubeharness.OnDemandLabels()})
		is.NoErr(err)
	}
	is.NoErr(k.AddTopology(ctx, "gke-tpu", kubeharness.LabelNodePool, "kubernetes.io/hostname"))
	flavor := kubeharness.OnDemandFlavor(16)
	flavor.TopologyName = "gke-tpu"
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "tpu", LocalQueue: "team", Flavors: []kubeharness.KueueFlavor{flavor}}))
	_, c := kueueDriver(t, driverConfig(t, cp), "team", "")
	spec := kueueSlice
	spec.NumSlices = 2
	spec.Timeout = time.Minute
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	is.NoErr(err)
	got, err := ray.RunOnSlice(ctx, spg, echoHost, 3)
	is.NoErr(err)
	is.Equal(got, []int{3, 3, 3, 3})
	wls, err := k.Workloads(ctx, "default")
	is.NoErr(err)
	is.Equal(len(wls), 1)
	psa, _, _ := unstructured.NestedSlice(wls[0].Object, "status", "admission", "podSetAssignments")
	is.True(len(psa) > 0)
	_, hasTA := psa[0].(map[string]any)["topologyAssignment"]
	is.True(hasTA) // Kueue placed the pods by topology
	is.NoErr(spg.Release(ctx))
	is.NoErr(c.Close())
	waitNothingOfKueueLeft(t, cp, k, true)
}
