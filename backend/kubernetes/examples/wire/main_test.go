package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/tpu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// v6eNode is one host of GKE TPU node pool pool (v6e, topology topo).
func v6eNode(pool, topo string, i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{
			tpu.LabelGKEAccelerator: "tpu-v6e-slice", tpu.LabelGKETopology: topo, tpu.LabelGKENodePool: pool,
			tpu.LabelGKEAcceleratorCount: "4",
		}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{
				"google.com/tpu":      resource.MustParse("4"),
				corev1.ResourceCPU:    resource.MustParse("64"),
				corev1.ResourceMemory: resource.MustParse("256Gi"),
			},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// TestInjector builds the cluster through the generated injector on a fake
// clientset holding a v6e 4x4 node pool (4 hosts) and a 2x2 one, and lists
// their slices.
func TestInjector(t *testing.T) {
	is := is.New(t)
	objs := []runtime.Object{v6eNode("pool-b", "2x2", 0)}
	for i := range 4 {
		objs = append(objs, v6eNode("pool-a", "4x4", i))
	}
	cfg := kubernetes.Config{
		Client:    fake.NewClientset(objs...),
		Namespace: "default",
		Worker:    kubernetes.WorkerConfig{Image: "example.com/app:latest"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	is.NoErr(run(ctx, &out, cfg))
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	is.Equal(got, []string{
		"pool-a v6e 4x4 intact=true",
		"pool-b v6e 2x2 intact=true",
	})
}

func TestInjectorValidates(t *testing.T) {
	is := is.New(t)
	err := run(context.Background(), &bytes.Buffer{}, kubernetes.Config{Client: fake.NewClientset()})
	is.True(err != nil)
	is.True(strings.Contains(err.Error(), "Worker.Image is empty")) // the Config error, before any API call
}
