//go:build e2e

package kubernetes

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// slowTask blocks on its first attempt (until its context ends) and
// returns its node on the next.
var slowTask = ray.NewTask("k8stest.slow", func(ctx context.Context, _ struct{}) (string, error) {
	rc, _ := ray.Runtime(ctx)
	if rc.Attempt() == 0 {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Minute):
		}
	}
	return rc.NodeName(), nil
})

// TestE2ENodeLossMidTask deletes the Kubernetes node a task runs on: the
// task is retried on the other node. Then a host of a reserved v6e 4x4
// goes NotReady: the work on the slice fails with Unavailable, the slice
// is not intact and is not handed out, until the node is Ready again.
func TestE2ENodeLossMidTask(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 2})
	is.NoErr(err)
	hosts, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "4x4"})
	is.NoErr(err)
	driver, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	cfg := testConfig()
	cfg.Identity, cfg.Client, cfg.Worker.Image = "", driver, workerImage
	b, err := New(ctx, cfg)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()

	// A task on a CPU node; its node is deleted mid-task.
	ref := slowTask.Remote(ctx, c, struct{}{}, ray.Retries(1), ray.NodeSelector{"cloud.google.com/gke-nodepool": "cpu"})
	var first string
	is.NoErr(wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return false, err
		}
		for _, n := range snap.Nodes {
			if n.Running > 0 {
				first = n.Name
				return true, nil
			}
		}
		return false, nil
	}))
	is.NoErr(cp.Client().CoreV1().Nodes().Delete(ctx, first, metav1.DeleteOptions{}))
	second, err := ref.Get(ctx)
	is.NoErr(err)
	is.True(second != first) // retried on the other node
	t.Logf("task on %s: node deleted, retried on %s", first, second)

	// A reserved slice loses a host (NotReady).
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"})
	is.NoErr(err)
	slowOnSlice := ray.RunOnSlice[struct{}, string]
	done := make(chan error, 1)
	go func() { _, err := slowOnSlice(ctx, spg, slowTask, struct{}{}); done <- err }()
	is.NoErr(waitRunning(ctx, c, 4))
	setReady := func(name string, ready bool) {
		n, err := cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		is.NoErr(err)
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
				n.Status.Conditions[i].Reason = "KubeletNotReady"
			}
		}
		_, err = cp.Client().CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		is.NoErr(err)
	}
	setReady(hosts[2].Name, false)
	select {
	case err := <-done:
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		t.Logf("work on the slice: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the work on the slice did not fail")
	}
	is.NoErr(spg.Release(ctx))
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	is.Equal(len(states), 1)
	is.True(!states[0].Intact)
	_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Timeout: 500 * time.Millisecond})
	is.True(err != nil) // never handed out while a host is lost
	t.Logf("reservation while a host is NotReady: %v", err)

	setReady(hosts[2].Name, true)
	spg, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Timeout: time.Minute})
	is.NoErr(err)
	is.NoErr(spg.Release(ctx))
}
