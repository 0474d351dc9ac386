//go:build e2e

package kubeharness_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// TestKueueAdmitsPodGroupsWithinQuota runs Kueue against the control plane:
// a ClusterQueue with 4 on-demand and 4 Spot chips, and plain pod groups
// (Kueue's pod-group labels) of one v6e 2x2 host each. Each group is gated
// until Kueue admits it whole, in the flavor its node selector asks for;
// Kueue holds a third on-demand group while the first's chips are in use,
// saying why, then admits it once the first ends.
func TestKueueAdmitsPodGroupsWithinQuota(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	k, err := cp.StartKueue(ctx, nil)
	is.NoErr(err)
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "od", Generation: "v6e", Topology: "2x2", Labels: kubeharness.OnDemandLabels()})
	is.NoErr(err)
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "spot", Generation: "v6e", Topology: "2x2", Labels: kubeharness.SpotLabels()})
	is.NoErr(err)
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{
		ClusterQueue: "tpu", LocalQueue: "team", Flavors: []kubeharness.KueueFlavor{kubeharness.SpotFlavor(4), kubeharness.OnDemandFlavor(4)},
	}))

	group := func(name string, spot bool, args ...string) *corev1.Pod {
		p := tpuPod(t, name, "v6e", "2x2", 4, args...)
		p.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/pod-group-name": name}
		// Unretriable: once none of its pods is active the group's
		// Workload ends, releasing its quota (else it waits for
		// replacement pods).
		p.Annotations = map[string]string{"kueue.x-k8s.io/pod-group-total-count": "1", "kueue.x-k8s.io/retriable-in-group": "false"}
		// The flavor is the one whose node labels the pod asks for.
		p.Spec.NodeSelector[kubeharness.LabelProvisioning] = map[bool]string{false: "standard", true: "spot"}[spot]
		return p
	}
	pods := cp.Client().CoreV1().Pods("default")
	_, err = pods.Create(ctx, group("a", false, "sleep", "60s"), metav1.CreateOptions{})
	is.NoErr(err)
	_, err = pods.Create(ctx, group("s", true, "sleep", "60s"), metav1.CreateOptions{})
	is.NoErr(err)
	for _, name := range []string{"a", "s"} {
		p, err := cp.WaitForPod(ctx, "default", name, isPhase(corev1.PodRunning))
		is.NoErr(err)
		is.Equal(p.Spec.NodeSelector[kubeharness.LabelProvisioning], map[string]string{"a": "standard", "s": "spot"}[name]) // the flavor's node labels
	}
	var usage map[string]int64
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		usage, err = k.ClusterQueueUsage(ctx, "tpu")
		return err == nil && usage["on-demand"] == 4 && usage["spot"] == 4, nil
	})
	is.NoErr(err) // the ClusterQueue's status counts both groups' chips, each in its flavor

	// A third group waits for quota: gated, its workload not admitted, and
	// Kueue says why.
	b, err := pods.Create(ctx, group("b", false, "sleep", "1s"), metav1.CreateOptions{})
	is.NoErr(err)
	is.True(slices.ContainsFunc(b.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == "kueue.x-k8s.io/admission" }))
	var why string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		w := workloadOf(ctx, k, "b")
		if w == nil {
			return false, nil
		}
		why = condMessage(w, "QuotaReserved")
		return strings.Contains(why, "insufficient"), nil
	})
	is.NoErr(err)
	t.Logf("group b waits: %s", why)

	is.NoErr(pods.Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	_, err = cp.WaitForPod(ctx, "default", "b", isPhase(corev1.PodRunning, corev1.PodSucceeded))
	is.NoErr(err) // admitted once a's chips were released
}

// workloadOf returns the Workload of pod group name, or nil.
func workloadOf(ctx context.Context, k *kubeharness.Kueue, group string) *unstructured.Unstructured {
	ws, err := k.Workloads(ctx, "default")
	if err != nil {
		return nil
	}
	for i := range ws {
		if ws[i].GetName() == group || strings.HasPrefix(ws[i].GetName(), group+"-") {
			return &ws[i]
		}
	}
	return nil
}

func condMessage(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return fmt.Sprintf("%v: %v (%v)", m["status"], m["message"], m["reason"])
		}
	}
	return ""
}

// TestKueueTopologyAwareSlices: Kueue's topology-aware scheduling on the
// harness's nodes, with a GKE TPU cluster's levels (the node pool, which
// is a slice, then the host). Two v6e 2x4 slices of two 4-chip hosts; one
// host of slice "a" is taken by a pod Kueue does not manage. A pod group
// of two 4-chip pods that requires one node pool
// (kueue.x-k8s.io/podset-required-topology) is admitted with a topology
// assignment and lands whole on slice "b", never split across slices.
func TestKueueTopologyAwareSlices(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	k, err := cp.StartKueue(ctx, nil)
	is.NoErr(err)
	for _, name := range []string{"a", "b"} {
		_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: name, Generation: "v6e", Topology: "2x4", ChipsPerHost: 4, Labels: kubeharness.OnDemandLabels()})
		is.NoErr(err)
	}
	is.NoErr(k.AddTopology(ctx, "gke-tpu", kubeharness.LabelNodePool, "kubernetes.io/hostname"))
	flavor := kubeharness.OnDemandFlavor(16)
	flavor.TopologyName = "gke-tpu"
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "tpu", LocalQueue: "team", Flavors: []kubeharness.KueueFlavor{flavor}}))

	pods := cp.Client().CoreV1().Pods("default")
	other := tpuPod(t, "other", "v6e", "2x4", 4, "sleep", "120s")
	other.Spec.NodeName = "a-0"
	_, err = pods.Create(ctx, other, metav1.CreateOptions{})
	is.NoErr(err)
	_, err = cp.WaitForPod(ctx, "default", "other", isPhase(corev1.PodRunning))
	is.NoErr(err)

	for i := range 2 {
		p := tpuPod(t, fmt.Sprintf("g-%d", i), "v6e", "2x4", 4, "sleep", "120s")
		p.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team", "kueue.x-k8s.io/pod-group-name": "g"}
		p.Annotations = map[string]string{"kueue.x-k8s.io/pod-group-total-count": "2", "kueue.x-k8s.io/retriable-in-group": "false",
			"kueue.x-k8s.io/podset-required-topology": kubeharness.LabelNodePool}
		_, err = pods.Create(ctx, p, metav1.CreateOptions{})
		is.NoErr(err)
	}
	var nodes []string
	for i := range 2 {
		p, err := cp.WaitForPod(ctx, "default", fmt.Sprintf("g-%d", i), isPhase(corev1.PodRunning))
		if err != nil {
			w := workloadOf(ctx, k, "g")
			if w != nil {
				t.Logf("workload: %v", w.Object["status"])
			}
		}
		is.NoErr(err)
		nodes = append(nodes, p.Spec.NodeName)
	}
	t.Logf("the group's pods run on %v", nodes)
	for _, n := range nodes {
		is.True(strings.HasPrefix(n, "b-")) // both on slice b, the one with room for the whole group
	}
	w := workloadOf(ctx, k, "g")
	is.True(w != nil)
	ta, _, _ := unstructured.NestedSlice(w.Object, "status", "admission", "podSetAssignments")
	is.True(len(ta) > 0)
	_, hasTA := ta[0].(map[string]any)["topologyAssignment"]
	is.True(hasTA) // Kueue placed it by topology
}
