//go:build e2e

package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// BenchmarkE2EReserveV6e4x4 compares, on one control plane in one run, a
// v6e 4x4 reservation (claim the slice's Lease, create its 4 worker pods,
// wait until each worker is connected: Source.ClaimSlices then
// Runner.Reserved) with kube-scheduler alone placing the same 4 pods (the
// same image and resources, a TPU node selector instead of the node pin)
// until they are Running (kube-scheduler), and until each pod's worker
// accepts a TCP connection (kube-scheduler-listening: the worker's own
// start-up, which goray's "connected" includes, on both sides).
// Releasing and deleting is not timed. The target is goray within 1.2x
// of kube-scheduler-listening.
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2EReserveV6e4x4 -benchtime 10x -count 3 ./
func BenchmarkE2EReserveV6e4x4(b *testing.B) {
	cp := startHarnessB(b)
	ctx := context.Background()
	nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "bench", Generation: "v6e", Topology: "4x4"})
	if err != nil {
		b.Fatal(err)
	}
	client := cp.Client()
	cfg := testConfig()
	cfg.Worker.Image = workerImage
	leases, err := NewLeases(client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	src, err := NewSource(client, cfg, "bench", leases)
	if err != nil {
		b.Fatal(err)
	}
	sink := newRecordSink()
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(sctx, sink) })
	defer func() { stop(); wg.Wait() }()
	r, err := NewRunner(client, cfg, "bench")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := r.Start(ctx, ray.NewExecutor(ray.JSON), func(string, error) {}); err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	shape, _ := tpu.NewSliceShape(tpu.V6e, "4x4", 4)
	var hosts []string
	env := map[string]map[string]string{}
	for i, n := range nodes {
		hosts = append(hosts, n.Name)
		if err := r.NodeUp(ctx, hostNode(shape, "bench", i, n)); err != nil {
			b.Fatal(err)
		}
	}
	for i, h := range hosts {
		env[h], _ = tpu.WorkerEnv(shape, "bench", hosts, i)
	}
	sel, _ := kubeharness.TPUSelector("v6e", "4x4")
	round := 0

	b.Run("goray", func(b *testing.B) {
		for b.Loop() {
			round++
			claim := cluster.Claim{ID: fmt.Sprint("pg-", round), Slices: []string{"bench"}, Hosts: [][]string{hosts}}
			if err := src.ClaimSlices(ctx, claim); err != nil {
				b.Fatal(err)
			}
			if err := r.Reserved(ctx, claim, env); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			r.Released(claim)
			if err := src.ReleaseSlices(ctx, claim); err != nil {
				b.Fatal(err)
			}
			if err := cp.WaitForPodsGone(ctx, "default", LabelCluster+"=bench"); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	createPlain := func(b *testing.B) {
		round++
		for j := range hosts {
			p := r.pt.pod(podSpec{name: fmt.Sprintf("plain-%d-%d", round, j), node: hosts[j], chips: 4, env: env[hosts[j]],
				labels: map[string]string{"bench": "plain"}})
			p.Labels[LabelCluster] = "plain" // not the runner's pods
			p.Spec.Affinity, p.Spec.NodeSelector = nil, sel
			if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("kube-scheduler", func(b *testing.B) {
		for b.Loop() {
			createPlain(b)
			if _, err := cp.WaitForPods(ctx, "default", "bench=plain", len(hosts), func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodRunning
			}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			deletePlainPods(b, cp)
			b.StartTimer()
		}
	})
	// The same pods until each one's worker process accepts a TCP
	// connection: the worker's start-up is on both sides, as in goray's
	// "every worker connected".
	b.Run("kube-scheduler-listening", func(b *testing.B) {
		for b.Loop() {
			createPlain(b)
			if _, _, err := waitRunningAndListening(ctx, cp, "bench=plain", len(hosts), r.cfg.Worker.Port); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			deletePlainPods(b, cp)
			b.StartTimer()
		}
	})
}

// BenchmarkE2EClaimSlice measures one slice claim and release (the
// Leases a reservation takes) while the Source watches 4 nodes (one v6e 2x8 pool), then,
// in the same run, 1,000 kwok TPU nodes (15 v6e 16x16 pools and 10 2x8
// pools added to the first): the cost must not grow with the nodes,
// since discovery is a watch and a claim touches only its slice's Lease.
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2EClaimSlice -benchtime 200x -count 3 ./
func BenchmarkE2EClaimSlice(b *testing.B) {
	cp := startHarnessB(b)
	ctx := context.Background()
	if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "first", Generation: "v6e", Topology: "2x8", Kwok: true}); err != nil {
		b.Fatal(err)
	}
	// Count the driver's API requests, to show a claim's are constant.
	var calls atomic.Int64
	rc := cp.Config()
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls.Add(1)
			return rt.RoundTrip(r)
		})
	})
	client, err := k8s.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig()
	leases, err := NewLeases(client, cfg)
	if err != nil {
		b.Fatal(err)
	}
	src, err := NewSource(client, cfg, "bench", leases)
	if err != nil {
		b.Fatal(err)
	}
	sink := newRecordSink()
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(sctx, sink) })
	defer func() { stop(); wg.Wait() }()
	sink.waitForB(b, 4)
	claimLoop := func(b *testing.B, slices []string) {
		i := 0
		before := calls.Load()
		defer func() { b.ReportMetric(float64(calls.Load()-before)/float64(b.N), "api-calls/op") }()
		for b.Loop() {
			c := cluster.Claim{ID: fmt.Sprint("pg-", i), Slices: []string{slices[i%len(slices)]}}
			i++
			if err := src.ClaimSlices(ctx, c); err != nil {
				b.Fatal(err)
			}
			if err := src.ReleaseSlices(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("nodes=4", func(b *testing.B) { claimLoop(b, []string{"first"}) })

	t0 := time.Now()
	var slices []string
	for i := range 15 {
		name := fmt.Sprintf("big-%d", i)
		slices = append(slices, name)
		if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: name, Generation: "v6e", Topology: "16x16", Kwok: true}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 9 {
		name := fmt.Sprintf("small-%d", i)
		slices = append(slices, name)
		if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: name, Generation: "v6e", Topology: "2x8", Kwok: true}); err != nil {
			b.Fatal(err)
		}
	}
	sink.waitForB(b, 1000)
	b.Logf("the source reported 1,000 TPU nodes (25 slices) %v after the first of 984 new nodes was created", time.Since(t0))
	b.Run("nodes=1000", func(b *testing.B) { claimLoop(b, slices) })
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func startHarnessB(b *testing.B) *kubeharness.ControlPlane {
	b.Helper()
	exe, err := osExecutable()
	if err != nil {
		b.Fatal(err)
	}
	return kubeharness.Start(b, &kubeharness.Options{Images: map[string]string{workerImage: exe}})
}

// BenchmarkE2ECycleV6e4x4 measures what a program repeats: reserve a v6e
// 4x4 (ray.NewSlicePlacementGroup), run a task on every host
// (ray.RunOnSlice), release it, through a backend built as users build it
// (from a kubeconfig, so with the backend's default API limits, 50
// requests/s and bursts of 100), against kube-scheduler creating the same
// 4 pods until Running and deleting them until gone, in the same run.
// reserve-ms, run-ms and release-ms split the goray cycle;
// goray-pods-gone waits, untimed, for the released pods to be gone before
// the next reservation.
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2ECycleV6e4x4 -benchtime 10x -count 3 ./
func BenchmarkE2ECycleV6e4x4(b *testing.B) {
	cp := startHarnessB(b)
	ctx := context.Background()
	if _, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "bench", Generation: "v6e", Topology: "4x4"}); err != nil {
		b.Fatal(err)
	}
	kubeconfig := driverKubeconfig(b, cp)
	goray := func(b *testing.B, waitGone bool) {
		cfg := Config{Kubeconfig: kubeconfig, Namespace: "default", Identity: "bench",
			Worker: WorkerConfig{Image: workerImage, StartTimeout: time.Minute}}
		be, err := New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		c, err := ray.NewCluster(ctx, be, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var reserve, run, release time.Duration
		for b.Loop() {
			t0 := time.Now()
			spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4"})
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := ray.RunOnSlice(ctx, spg, envPairTask, struct{}{}); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := spg.Release(ctx); err != nil {
				b.Fatal(err)
			}
			reserve, run, release = reserve+t1.Sub(t0), run+t2.Sub(t1), release+time.Since(t2)
			if waitGone {
				// Not timed: the release's pods gone before the next
				// reservation, to tell the reservation's own time from
				// waiting for the last one's chips.
				b.StopTimer()
				if err := cp.WaitForPodsGone(ctx, "default", LabelCluster); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
		n := float64(b.N)
		b.ReportMetric(float64(reserve.Milliseconds())/n, "reserve-ms")
		b.ReportMetric(float64(run.Milliseconds())/n, "run-ms")
		b.ReportMetric(float64(release.Milliseconds())/n, "release-ms")
	}
	b.Run("goray", func(b *testing.B) { goray(b, false) })
	b.Run("goray-pods-gone", func(b *testing.B) { goray(b, true) })
	b.Run("kube-scheduler", func(b *testing.B) {
		client := cp.Client()
		sel, _ := kubeharness.TPUSelector("v6e", "4x4")
		round := 0
		for b.Loop() {
			round++
			for j := range 4 {
				p := kubeharness.NewTestProgramPod(fmt.Sprintf("plain-%d-%d", round, j), "sleep")
				p.Labels = map[string]string{"bench": "plain"}
				p.Spec.NodeSelector = sel
				q := resource.MustParse("4")
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
					Limits: corev1.ResourceList{resourceTPU: q}, Requests: corev1.ResourceList{resourceTPU: q}}
				if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := cp.WaitForPods(ctx, "default", "bench=plain", 4, func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodRunning
			}); err != nil {
				b.Fatal(err)
			}
			deletePlainPods(b, cp) // timed: part of the cycle
		}
	})
}

// deletePlainPods deletes the baselines' pods (label bench=plain) at once
// and waits until they are gone.
func deletePlainPods(tb testing.TB, cp *kubeharness.ControlPlane) {
	tb.Helper()
	zero := int64(0)
	ctx := context.Background()
	if err := cp.Client().CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "bench=plain"}); err != nil {
		tb.Fatal(err)
	}
	if err := cp.WaitForPodsGone(ctx, "default", "bench=plain"); err != nil {
		tb.Fatal(err)
	}
}
