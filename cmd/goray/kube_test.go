package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/tpu"
)

// gkeNodes returns the Ready nodes of a GKE TPU node pool.
func gkeNodes(pool, accel, topo string, hosts int) []runtime.Object {
	var out []runtime.Object
	for i := range hosts {
		out = append(out, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", pool, i), Labels: map[string]string{
				tpu.LabelGKEAccelerator: accel, tpu.LabelGKETopology: topo, tpu.LabelGKENodePool: pool,
			}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{tpu.ResourceGKETPU: resource.MustParse("4")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		})
	}
	return out
}

// TestSlicesKubernetes runs goray slices --kubeconfig against a fake
// clientset: two v6e 4x4 slices, one held by a driver's Lease, and a v5p
// 2x2x2 slice missing a host.
func TestSlicesKubernetes(t *testing.T) {
	objs := append(gkeNodes("train-a", "tpu-v6e-slice", "4x4", 4), gkeNodes("train-b", "tpu-v6e-slice", "4x4", 4)...)
	objs = append(objs, gkeNodes("big", "tpu-v5p-slice", "2x2x4", 3)...)
	client := fake.NewClientset(objs...)
	leases, err := kubernetes.NewLeases(client, kubernetes.Config{Worker: kubernetes.WorkerConfig{Image: "example.com/app"}, Identity: "alice-laptop", Namespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if err := leases.Claim(t.Context(), "7", []string{"train-b"}); err != nil {
		t.Fatal(err)
	}
	kubeClient = client
	t.Cleanup(func() { kubeClient = nil })

	tests := []struct {
		name   string
		args   []string
		stdout []string
	}{
		{"grids and holders", []string{"slices", "--kubeconfig", "unused", "--namespace", "ml"}, []string{
			"v6e        4x4             2      2      1        1",
			"train-a (v6e 4x4, 4 hosts): free\n  .0 .0 .1 .1\n",
			"train-b (v6e 4x4, 4 hosts): A = alice-laptop (reservation 7)\n  A0 A0 A1 A1\n",
			"SLICE    HELD BY       RESERVATION  LEASE EXPIRES\ntrain-b  alice-laptop  7",
			"big (v5p 2x2x4, 4 hosts): free, not intact\n  .0 .0   .1 .1   .2 .2   x3 x3\n",
			"Not whole:\n  big: TPU slice \"big\" (v5p 2x2x4) has 3 of its 4 hosts",
		}},
		{"another namespace holds nothing", []string{"slices", "--context", "gke", "--namespace", "other"}, []string{
			"train-b (v6e 4x4, 4 hosts): free",
			"No slice is held (no live goray slice Lease in namespace other).",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var stdout, stderr bytes.Buffer
			is.Equal(run(t.Context(), tt.args, &stdout, &stderr), exitOK)
			is.Equal(stderr.String(), "")
			for _, s := range tt.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
		})
	}
	t.Run("as JSON", func(t *testing.T) {
		is := is.New(t)
		var stdout, stderr bytes.Buffer
		is.Equal(run(t.Context(), []string{"slices", "--kubeconfig", "unused", "--namespace", "ml", "--json"}, &stdout, &stderr), exitOK)
		var infos []kubernetes.SliceInfo
		is.NoErr(json.Unmarshal(stdout.Bytes(), &infos))
		is.Equal(len(infos), 3)
		is.Equal(infos[2].Name, "train-b")
		is.Equal(infos[2].Holder, "alice-laptop")
		is.Equal(infos[2].Reservation, "7")
	})
}
