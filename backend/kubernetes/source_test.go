package kubernetes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

func testConfig() Config {
	return Config{Worker: WorkerConfig{Image: "example.com/app"}, Identity: "driver-a"}
}

// runSource starts a source over a fake clientset holding objs and
// returns it with its sink; the source stops when the test ends.
func runSource(t *testing.T, cfg Config, objs ...runtime.Object) (*Source, *fake.Clientset, *recordSink) {
	t.Helper()
	client := newFakeClient(objs...)
	src, err := NewSource(client, cfg, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := newRecordSink()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(ctx, sink) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := src.Synced(t.Context()); err != nil {
		t.Fatal(err)
	}
	return src, client, sink
}

func objects(nodes ...[]*corev1.Node) []runtime.Object {
	var out []runtime.Object
	for _, ns := range nodes {
		for _, n := range ns {
			out = append(out, n)
		}
	}
	return out
}

func names(ev []event) []string {
	var out []string
	for _, e := range ev {
		out = append(out, e.String())
	}
	return out
}

func TestSourceReportsWholeSlicesAndCPUNodes(t *testing.T) {
	is := is.New(t)
	whole := tpuNodes("a", "tpu-v6e-slice", "2x4", 2, 4)
	partial := tpuNodes("b", "tpu-v6e-slice", "4x4", 3, 4) // 3 of 4 hosts
	_, client, sink := runSource(t, testConfig(), objects(whole, partial, []*corev1.Node{cpuNodeObj("cpu-1")})...)
	ev := sink.waitFor(t, 3)
	got := names(ev)
	is.True(len(got) == 3)
	is.True(strings.Contains(strings.Join(got, ","), "added a-0"))
	is.True(strings.Contains(strings.Join(got, ","), "added a-1"))
	is.True(strings.Contains(strings.Join(got, ","), "added cpu-1"))
	for _, e := range ev {
		if e.name == "a-1" {
			is.Equal(e.node.Labels[tpu.LabelWorkerID], "1")
			is.Equal(e.node.Labels[tpu.LabelSliceName], "a")
			is.Equal(e.node.Resources[backend.TPU], 4.0)
		}
		if e.name == "cpu-1" {
			is.Equal(e.node.Resources[backend.CPU], 8.0)
			is.Equal(e.node.Resources[backend.TPU], 0.0)
		}
	}
	// The fourth host of b arrives: b is whole and reported.
	last := tpuNodes("b", "tpu-v6e-slice", "4x4", 4, 4)[3]
	_, err := client.CoreV1().Nodes().Create(t.Context(), last, metav1.CreateOptions{})
	is.NoErr(err)
	ev = sink.waitFor(t, 7)
	is.Equal(names(ev[3:]), []string{"added b-0", "added b-1", "added b-2", "added b-3"})
}

func TestSourceReportsLostAndReturningHosts(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("a", "tpu-v6e-slice", "4x4", 4, 4)
	src, client, sink := runSource(t, testConfig(), objects(nodes)...)
	sink.waitFor(t, 4)
	ctx := t.Context()

	// NotReady: lost, with the reason.
	nr := nodes[1].DeepCopy()
	nr.Status.Conditions[0].Status = corev1.ConditionFalse
	nr.Status.Conditions[0].Reason = "KubeletNotReady"
	_, err := client.CoreV1().Nodes().UpdateStatus(ctx, nr, metav1.UpdateOptions{})
	is.NoErr(err)
	ev := sink.waitFor(t, 5)
	is.Equal(ev[4].String(), "lost a-1")
	is.True(strings.Contains(ev[4].err.Error(), "not Ready (KubeletNotReady"))

	// Ready again: added again, same worker ID.
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, nodes[1], metav1.UpdateOptions{})
	is.NoErr(err)
	ev = sink.waitFor(t, 6)
	is.Equal(ev[5].String(), "added a-1")
	is.Equal(ev[5].node.Labels[tpu.LabelWorkerID], "1")

	// Deleted, then replaced by a node of another name: the new node is
	// worker 2, under the runtime name of the host it replaces (the
	// runtime sees a-2 come back), on Kubernetes node a-new.
	is.NoErr(client.CoreV1().Nodes().Delete(ctx, "a-2", metav1.DeleteOptions{}))
	ev = sink.waitFor(t, 7)
	is.Equal(ev[6].String(), "lost a-2")
	is.True(strings.Contains(ev[6].err.Error(), "deleted"))
	repl := nodes[2].DeepCopy()
	repl.Name = "a-new"
	_, err = client.CoreV1().Nodes().Create(ctx, repl, metav1.CreateOptions{})
	is.NoErr(err)
	ev = sink.waitFor(t, 8)
	is.Equal(ev[7].String(), "added a-2")
	is.Equal(ev[7].node.Labels[tpu.LabelWorkerID], "2")
	is.Equal(ev[7].node.Labels[LabelNode], "a-new")
	is.Equal(src.KubeNode("a-2"), "a-new")

	// The replacement goes NotReady: a-2 is lost again.
	nr = repl.DeepCopy()
	nr.Status.Conditions[0].Status = corev1.ConditionFalse
	_, err = client.CoreV1().Nodes().UpdateStatus(ctx, nr, metav1.UpdateOptions{})
	is.NoErr(err)
	ev = sink.waitFor(t, 9)
	is.Equal(ev[8].String(), "lost a-2")
}

// TestSourceReplacementPrefersWorkerLabel: of the spare nodes, the one
// labelled with the lost host's worker ID replaces it; a node of another
// shape in the pool never does.
func TestSourceReplacementPrefersWorkerLabel(t *testing.T) {
	is := is.New(t)
	nodes := tpuNodes("a", "tpu-v6e-slice", "4x4", 4, 4)
	src, client, sink := runSource(t, testConfig(), objects(nodes)...)
	sink.waitFor(t, 4)
	ctx := t.Context()
	wrong := tpuNodes("a", "tpu-v5p-slice", "2x2x1", 1, 4)[0]
	wrong.Name = "a-0-other-shape"
	other := nodes[0].DeepCopy()
	other.Name, other.Labels[tpu.LabelWorkerID] = "a-10", "3"
	mine := nodes[1].DeepCopy()
	mine.Name, mine.Labels[tpu.LabelWorkerID] = "a-11", "1"
	for _, n := range []*corev1.Node{wrong, other, mine} {
		_, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		is.NoErr(err)
	}
	// The spares wait (the slice is whole) until a host's node is gone.
	is.NoErr(client.CoreV1().Nodes().Delete(ctx, "a-1", metav1.DeleteOptions{}))
	ev := sink.waitFor(t, 6)
	is.Equal(names(ev[4:6]), []string{"lost a-1", "added a-1"})
	is.Equal(ev[5].node.Labels[LabelNode], "a-11")
	is.Equal(src.KubeNode("a-1"), "a-11")
}

func TestSourceKillRestoreDrain(t *testing.T) {
	is := is.New(t)
	src, _, sink := runSource(t, testConfig(), cpuNodeObj("cpu-1"))
	sink.waitFor(t, 1)
	ctx := t.Context()
	is.NoErr(src.Kill(ctx, "cpu-1"))
	ev := sink.snapshot() // Kill reports before it returns
	is.Equal(names(ev), []string{"added cpu-1", "lost cpu-1"})
	is.NoErr(src.Restore(ctx, "cpu-1"))
	is.Equal(names(sink.snapshot())[2], "added cpu-1")
	is.NoErr(src.Drain(ctx, "cpu-1"))
	is.Equal(names(sink.snapshot())[3], "draining cpu-1")

	err := src.Kill(ctx, "nope")
	is.Equal(backend.CodeOf(err), backend.NotFound)
	is.True(strings.Contains(err.Error(), "nope"))
	err = src.Add(ctx, cpuNode(cpuNodeObj("x")))
	is.Equal(backend.CodeOf(err), backend.Unimplemented)
}

func TestSourceCapsCPUNodes(t *testing.T) {
	is := is.New(t)
	cfg := testConfig()
	cfg.CPUPool = CPUPool{Max: 2, NodeSelector: map[string]string{"pool": "cpu"}}
	var objs []runtime.Object
	for _, name := range []string{"c1", "c2", "c3", "other"} {
		n := cpuNodeObj(name)
		if name != "other" {
			n.Labels["pool"] = "cpu"
		}
		objs = append(objs, n)
	}
	_, client, sink := runSource(t, cfg, objs...)
	ev := sink.waitFor(t, 2)
	is.Equal(len(ev), 2)
	// One reported node goes away: the third takes its place once it is
	// reconciled again.
	gone := ev[0].name
	is.NoErr(client.CoreV1().Nodes().Delete(t.Context(), gone, metav1.DeleteOptions{}))
	ev = sink.waitFor(t, 4)
	is.Equal(ev[2].String(), "lost "+gone)
	is.Equal(ev[3].kind, "added")
	is.True(ev[3].name != "other" && ev[3].name != ev[0].name && ev[3].name != ev[1].name)
}

func TestSourceRuntimeNameLabel(t *testing.T) {
	is := is.New(t)
	n := cpuNodeObj("gke-pool-1-a2b3")
	n.Labels[LabelName] = "solo"
	src, _, sink := runSource(t, testConfig(), n)
	ev := sink.waitFor(t, 1)
	is.Equal(ev[0].name, "solo")
	is.Equal(ev[0].node.Labels[LabelNode], "gke-pool-1-a2b3") // the runner pins pods there
	is.NoErr(src.Kill(t.Context(), "solo"))
	is.NoErr(src.Restore(t.Context(), "solo"))
	is.Equal(names(sink.snapshot()), []string{"added solo", "lost solo", "added solo"})
}

// TestSourceWorkerGone: a node whose worker pod was lost (and deleted) is
// reported again when the node is still usable, TPU host and CPU node
// alike, so a deleted or evicted pod does not take its host, and so its
// slice, away for good; an unusable node is reported lost again, so that
// the runtime stops waiting for its restart.
func TestSourceWorkerGone(t *testing.T) {
	is := is.New(t)
	slice := tpuNodes("a", "tpu-v6e-slice", "2x4", 2, 4)
	src, client, sink := runSource(t, testConfig(), objects(slice, []*corev1.Node{cpuNodeObj("cpu-1")})...)
	sink.waitFor(t, 3)

	src.WorkerGone("a-1") // the runtime had it lost through the runner
	src.WorkerGone("cpu-1")
	ev := sink.waitFor(t, 5)
	is.Equal(names(ev[3:]), []string{"added a-1", "added cpu-1"})

	// A NotReady node is not brought back by its pod's loss.
	n := slice[0].DeepCopy()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	_, err := client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
	is.NoErr(err)
	ev = sink.waitFor(t, 6)
	is.True(strings.HasPrefix(names(ev)[5], "lost a-0"))
	// Its pod's loss is reported lost again, for good: the runner reported
	// it as restarting, and the runtime stops waiting for it.
	src.WorkerGone("a-0")
	ev = sink.waitFor(t, 7)
	is.True(strings.HasPrefix(names(ev)[6], "lost a-0"))
	t.Log(ev[6].err)
	is.True(strings.Contains(ev[6].err.Error(), "cannot run a new one"))
	time.Sleep(100 * time.Millisecond)
	is.Equal(len(sink.snapshot()), 7) // and not added
}
