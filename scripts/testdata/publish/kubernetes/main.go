// Command kubernetes is check-publish.sh's program on the Kubernetes
// backend: a backend on client-go's fake clientset holding one v6e 2x4
// node pool (two hosts) discovers the slice.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

func node(i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-a-%d", i), Labels: map[string]string{
			tpu.LabelGKEAccelerator: "tpu-v6e-slice", tpu.LabelGKETopology: "2x4",
			tpu.LabelGKENodePool: "pool-a", tpu.LabelGKEAcceleratorCount: "4",
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

func main() {
	ray.Main()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := fake.NewClientset(node(0), node(1))
	b, err := kubernetes.New(ctx, kubernetes.Config{Client: client, Worker: kubernetes.WorkerConfig{Image: "example.com/app:v1"}})
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for {
		slices, err := b.Slices(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if len(slices) == 1 && slices[0].Intact {
			fmt.Println("kubernetes ok:", slices[0].Name, slices[0].Generation, slices[0].Topology)
			return
		}
		select {
		case <-ctx.Done():
			log.Fatalf("no intact slice discovered: %v", slices)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
