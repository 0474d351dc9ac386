package kubernetes

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// tpuNodes returns the Ready nodes of a GKE TPU node pool named pool.
func tpuNodes(pool, accel, topo string, hosts, chips int) []*corev1.Node {
	var out []*corev1.Node
	for i := range hosts {
		out = append(out, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{
				tpu.LabelGKEAccelerator: accel, tpu.LabelGKETopology: topo, tpu.LabelGKENodePool: pool,
				tpu.LabelGKEAcceleratorCount: fmt.Sprint(chips),
			}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{
					resourceTPU:           *resource.NewQuantity(int64(chips), resource.DecimalSI),
					corev1.ResourceCPU:    resource.MustParse("64"),
					corev1.ResourceMemory: resource.MustParse("256Gi"),
				},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		})
	}
	return out
}

func cpuNodeObj(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// event is one report of a source to its sink.
type event struct {
	kind string // added, draining, lost
	node cluster.Node
	name string
	err  error
}

func (e event) String() string {
	if e.kind == "added" {
		return "added " + e.node.Name
	}
	return e.kind + " " + e.name
}

// recordSink is a cluster.NodeSink that records its reports in order.
type recordSink struct {
	mu     sync.Mutex
	events []event
	ch     chan struct{}
}

func newRecordSink() *recordSink { return &recordSink{ch: make(chan struct{}, 1)} }

func (r *recordSink) add(e event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recordSink) NodeAdded(n cluster.Node) { r.add(event{kind: "added", node: n, name: n.Name}) }
func (r *recordSink) NodeDraining(name string) { r.add(event{kind: "draining", name: name}) }
func (r *recordSink) NodeLost(name string, cause error) {
	r.add(event{kind: "lost", name: name, err: cause})
}
func (r *recordSink) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// waitFor waits until the sink has recorded n events and returns them.
func (r *recordSink) waitFor(t testing.TB, n int) []event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if ev := r.snapshot(); len(ev) >= n {
			return ev
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("want %d events, have %v", n, r.snapshot())
		}
	}
}

// waitForEvent waits until the sink has recorded the event (as
// event.String gives it) and returns it.
func (r *recordSink) waitForEvent(t *testing.T, want string) event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		for _, e := range r.snapshot() {
			if e.String() == want {
				return e
			}
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("want event %q, have %v", want, r.snapshot())
		}
	}
}

func (r *recordSink) waitForB(b *testing.B, n int) []event { return r.waitFor(b, n) }

// newFakeClient is the client-go fake clientset with DeleteCollection of pods,
// which its object tracker does not implement: it deletes the objects of
// the namespace that match the label selector.
func newFakeClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	client.PrependReactor("delete-collection", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		dc := a.(clienttesting.DeleteCollectionAction)
		sel, err := labels.Parse(dc.GetListRestrictions().Labels.String())
		if err != nil {
			return true, nil, err
		}
		gvr := dc.GetResource()
		gvk := gvr.GroupVersion().WithKind("Pod")
		list, err := client.Tracker().List(gvr, gvk, dc.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return true, nil, err
		}
		for _, o := range items {
			m, err := meta.Accessor(o)
			if err != nil {
				return true, nil, err
			}
			if sel.Matches(labels.Set(m.GetLabels())) {
				if err := client.Tracker().Delete(gvr, m.GetNamespace(), m.GetName()); err != nil {
					return true, nil, err
				}
			}
		}
		return true, nil, nil
	})
	return client
}
