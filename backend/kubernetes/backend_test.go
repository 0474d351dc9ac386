package kubernetes

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// startBackend runs the whole backend (the runtime with Source and
// Runner) on a fake clientset holding nodes, with a fake kubelet.
func startBackend(t *testing.T, cfg Config, nodes ...[]*corev1.Node) (*Backend, *fakeKubelet) {
	t.Helper()
	client := newFakeClient(objects(nodes...)...)
	k := startKubelet(t, client, "default")
	cfg.Client = client
	cfg.Worker.Port = int32(k.port)
	cfg.Worker.StartTimeout = 10 * time.Second
	leases, err := NewLeases(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(client, cfg, "c1", leases)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(client, cfg, "c1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewFromParts(cfg, "c1", src, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(t.Context(), echoExec{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, k
}

// waitSlice waits until the backend reports slice name with intact.
func waitSlice(t *testing.T, b *Backend, name string, intact bool) backend.SliceState {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		states, err := b.Slices(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if s.Name == name && s.Intact == intact {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slice %s never intact=%v: %+v", name, intact, states)
		}
		time.Sleep(10 * time.Millisecond) // polls the runtime's view; no event to wait on
	}
}

// TestBackendReplacedHostMakesSliceWhole: GKE recreates a TPU VM under a
// new node name; the slice, complete before, is whole again with the new
// node as the lost host's worker, and its reservation's pod is pinned to
// the new node.
func TestBackendReplacedHostMakesSliceWhole(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("a", "tpu-v6e-slice", "4x4", 4, 4)
	b, k := startBackend(t, testConfig(), nodes)
	ctx := t.Context()
	waitSlice(t, b, "a", true)

	is.NoErr(k.client.CoreV1().Nodes().Delete(ctx, "a-2", metav1.DeleteOptions{}))
	waitSlice(t, b, "a", false)
	repl := nodes[2].DeepCopy()
	repl.Name = "gke-a-2-recreated"
	_, err := k.client.CoreV1().Nodes().Create(ctx, repl, metav1.CreateOptions{})
	is.NoErr(err)
	s := waitSlice(t, b, "a", true)
	is.Equal(len(s.Hosts), 4)

	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 4)
	is.NoErr(err)
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err := b.ReserveSlices(rctx, &backend.SliceRequest{Shape: shape})
	is.NoErr(err) // the slice is handed out again
	defer b.RemovePlacementGroup(ctx, res.Group)
	pods, err := k.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelWorkerID + "=2"})
	is.NoErr(err)
	is.Equal(len(pods.Items), 1)
	term := pods.Items[0].Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	is.Equal(term.MatchFields[0].Values, []string{"gke-a-2-recreated"}) // pinned to the new node
}
