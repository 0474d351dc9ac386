//go:build e2e

package kubernetes

import (
	"cmp"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// TestE2EWorkOnTaintedTPUHost: GKE taints TPU nodes with
// google.com/tpu=present:NoSchedule. Work the runtime places on a TPU
// host outside a reservation (a CPU task pinned to the host, as data
// preparation on a TPU VM is) runs in the node's CPU worker pod, which
// must tolerate that taint, and must not carry Config.Pod.NodeSelector
// (meant for CPU nodes), or it never schedules; a reservation of the same
// slice afterwards gets the host's chips.
func TestE2EWorkOnTaintedTPUHost(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "tainted", Generation: "v6e", Topology: "2x2", ChipsPerHost: 4,
		Taints: []corev1.Taint{kubeharness.TPUTaint}})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1, Labels: map[string]string{"pool": "cpu"}})
	is.NoErr(err)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	cfg := testConfig()
	cfg.Client = client
	cfg.Worker.Image = workerImage
	cfg.Worker.StartTimeout = 20 * time.Second
	cfg.Pod.NodeSelector = map[string]string{"pool": "cpu"}
	b, err := New(ctx, cfg)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()

	onHost := ray.NodeSelector{tpu.LabelSliceName: "tainted"}
	runCtx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	env, err := podEnvTask.Remote(runCtx, c, struct{}{}, onHost).Get(runCtx)
	is.NoErr(err) // the CPU pod was scheduled on the tainted TPU node
	pod, err := client.CoreV1().Pods(cmp.Or(cfg.Namespace, "default")).Get(ctx, env.Pod, metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(pod.Spec.NodeName, "tainted-0")
	is.Equal(len(pod.Spec.NodeSelector), 0)                                                     // the CPU nodes' selector is not the TPU host's
	is.Equal(pod.Spec.Containers[0].Resources.Requests.Name(resourceTPU, "").Value(), int64(0)) // no chips: not a reservation

	_, err = podEnvTask.Remote(runCtx, c, struct{}{}).Get(runCtx)
	is.NoErr(err) // plain work still runs on the CPU nodes

	spg, err := ray.NewSlicePlacementGroup(runCtx, c, ray.SliceSpec{Topology: "2x2", AcceleratorVersion: "v6e"})
	if err != nil && strings.Contains(err.Error(), "busy") {
		t.Fatalf("the idle CPU pod kept the slice: %v", err)
	}
	is.NoErr(err)
	envs, err := ray.RunOnSlice(runCtx, spg, podEnvTask, struct{}{})
	is.NoErr(err)
	is.Equal(len(envs), 1)
	is.Equal(envs[0].WorkerID, "0") // a reservation pod with the host's env
	is.NoErr(spg.Release(ctx))
}
