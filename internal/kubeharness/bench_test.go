//go:build e2e

package kubeharness_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"golang.org/x/sync/errgroup"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// BenchmarkPodsToRunning measures pods per second from creation to phase
// Running through kube-scheduler and the node agent (which really starts a
// process per pod): 100 pods of one google.com/tpu chip each on the 64
// hosts of a v6e 16x16 slice (4 chips per host). Each round creates the
// pods with 32 concurrent calls and waits, with a watch, until all 100 are
// Running; deleting them is not timed. Run it with
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkPodsToRunning -benchtime 5x ./internal/kubeharness/
//
// (make e2e-bench). The result is the baseline the Kubernetes backend is
// held against; see docs/harness.md.
func BenchmarkPodsToRunning(b *testing.B) {
	const pods = 100
	cp := kubeharness.Start(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "bench", Generation: "v6e", Topology: "16x16"})
	if err != nil {
		b.Fatal(err)
	}
	if len(nodes) != 64 {
		b.Fatalf("got %d nodes, want 64", len(nodes))
	}
	sel, err := kubeharness.TPUSelector("v6e", "16x16")
	if err != nil {
		b.Fatal(err)
	}
	c := cp.Client().CoreV1().Pods("default")
	var (
		timed  time.Duration
		rounds int
		hosts  = map[string]bool{}
	)
	for b.Loop() {
		round := fmt.Sprintf("r%d", rounds)
		start := time.Now()
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(32)
		for i := range pods {
			g.Go(func() error {
				pod := kubeharness.NewTestProgramPod(fmt.Sprintf("bench-%s-%d", round, i), "sleep")
				pod.Labels = map[string]string{"round": round}
				pod.Spec.NodeSelector = sel
				one := corev1.ResourceList{kubeharness.ResourceTPU: *resourceOne()}
				pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: one, Requests: one}
				_, err := c.Create(gctx, pod, metav1.CreateOptions{})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		running, err := cp.WaitForPods(ctx, "default", "round="+round, pods, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning
		})
		if err != nil {
			b.Fatal(err)
		}
		timed += time.Since(start)
		rounds++

		b.StopTimer()
		for _, p := range running {
			hosts[p.Spec.NodeName] = true
		}
		zero := int64(0)
		err = c.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: "round=" + round})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range running {
			proc, err := cp.PodProcess("default", p.Name, "")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proc.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := cp.WaitForPodsGone(ctx, "default", "round="+round); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(pods*rounds)/timed.Seconds(), "pods/s")
	b.ReportMetric(timed.Seconds()/float64(rounds), "s/100pods")
	b.Logf("%d rounds of %d pods: %.1f pods/s, %.2f s per round, %d of 64 hosts used",
		rounds, pods, float64(pods*rounds)/timed.Seconds(), timed.Seconds()/float64(rounds), len(hosts))
}

func resourceOne() *resource.Quantity { return resource.NewQuantity(1, resource.DecimalSI) }
