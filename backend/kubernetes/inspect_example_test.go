package kubernetes_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// InspectSlices reads who holds which slice; ray.FormatSlices draws them.
// Here a fake clientset holds two single-host v6e 2x2 node pools, and a
// driver claims one of them.
func ExampleInspectSlices() {
	ctx := context.Background()
	client := fake.NewClientset()
	for _, pool := range []string{"pool-a", "pool-b"} {
		client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: pool + "-0", Labels: map[string]string{
				tpu.LabelGKEAccelerator: "tpu-v6e-slice", tpu.LabelGKETopology: "2x2", tpu.LabelGKENodePool: pool,
			}},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{tpu.ResourceGKETPU: resource.MustParse("4")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}, metav1.CreateOptions{})
	}
	leases, err := kubernetes.NewLeases(client, kubernetes.Config{Worker: kubernetes.WorkerConfig{Image: "example.com/app"}, Identity: "trainer-1"})
	if err != nil {
		panic(err)
	}
	if err := leases.Claim(ctx, "3", []string{"pool-b"}); err != nil {
		panic(err)
	}

	infos, err := kubernetes.InspectSlices(ctx, kubernetes.Config{Client: client})
	if err != nil {
		panic(err)
	}
	fmt.Print(ray.FormatSlices(kubernetes.SliceStates(infos)))
	for _, si := range infos {
		fmt.Printf("%s: holder %q, reservation %q\n", si.Name, si.Holder, si.Reservation)
	}
	// Output:
	// pool-a (v6e 2x2, 1 hosts): free
	//   .0 .0
	//   .0 .0
	// pool-b (v6e 2x2, 1 hosts): A = trainer-1 (reservation 3)
	//   A0 A0
	//   A0 A0
	// pool-a: holder "", reservation ""
	// pool-b: holder "trainer-1", reservation "3"
}
