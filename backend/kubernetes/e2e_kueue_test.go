//go:build e2e

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/train"
)

// kueueHarness starts a control plane with Kueue, one on-demand v6e 2x4
// slice of two 4-chip hosts, a ClusterQueue "tpu" of 8 on-demand and 8
// Spot chips with its LocalQueue "team", and the WorkloadPriorityClasses
// "low" (100) and "high" (1000).
func kueueHarness(t *testing.T) (*kubeharness.ControlPlane, *kubeharness.Kueue) {
	t.Helper()
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	k, err := cp.StartKueue(ctx, nil)
	is.NoErr(err)
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4,
		Labels: kubeharness.OnDemandLabels()})
	is.NoErr(err)
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "tpu", LocalQueue: "team",
		Flavors: []kubeharness.KueueFlavor{kubeharness.SpotFlavor(8), kubeharness.OnDemandFlavor(8)}}))
	is.NoErr(k.AddPriorityClass(ctx, "low", 100))
	is.NoErr(k.AddPriorityClass(ctx, "high", 1000))
	return cp, k
}

// kueueDriver starts a driver (rc: deploy/rbac.yaml's identity) whose
// reservations LocalQueue lq admits with priority class prio.
func kueueDriver(t *testing.T, rc *rest.Config, lq, prio string, edit ...func(*Config)) (*Backend, *ray.Cluster) {
	t.Helper()
	is := is.New(t)
	client, err := k8s.NewForConfig(rc)
	is.NoErr(err)
	cfg := testConfig()
	cfg.Identity, cfg.Client, cfg.Worker.Image = "driver-"+lq, client, workerImage
	cfg.Kueue = KueueConfig{LocalQueue: lq, PriorityClass: prio}
	cfg.Logger = slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, e := range edit {
		e(&cfg)
	}
	b, err := New(t.Context(), cfg)
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), b, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	return b, c
}

// tLogWriter writes a driver's log lines to the test's log.
type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

var kueueSlice = ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4}

// TestE2EKueueBadQueueAndInfeasible: in the LocalQueue mode a LocalQueue
// that does not exist is FailedPrecondition naming it (and the queues that
// do), and a reservation of more chips than the ClusterQueue can ever
// admit is Infeasible, both at once and leaving no pod.
func TestE2EKueueBadQueueAndInfeasible(t *testing.T) {
	is := is.New(t)
	cp, k := kueueHarness(t)
	ctx := t.Context()
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "small", LocalQueue: "small",
		Flavors: []kubeharness.KueueFlavor{kubeharness.OnDemandFlavor(4)}}))

	rc := driverConfig(t, cp)
	_, c := kueueDriver(t, rc, "nope", "")
	t0 := time.Now()
	_, err := ray.NewSlicePlacementGroup(ctx, c, kueueSlice)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	is.True(strings.Contains(err.Error(), `"nope"`))      // names the queue
	is.True(strings.Contains(err.Error(), "small, team")) // and the namespace's queues
	is.True(time.Since(t0) < 10*time.Second)              // at once
	t.Logf("no such LocalQueue (%v): %v", time.Since(t0).Round(time.Millisecond), err)

	_, c = kueueDriver(t, rc, "small", "")
	t0 = time.Now()
	_, err = ray.NewSlicePlacementGroup(ctx, c, kueueSlice)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	is.True(strings.Contains(err.Error(), "needs 8 google.com/tpu")) // what it needs
	is.True(strings.Contains(err.Error(), "ClusterQueue small"))     // and who cannot give it
	is.True(time.Since(t0) < 10*time.Second)
	t.Logf("over the ClusterQueue's quota (%v): %v", time.Since(t0).Round(time.Millisecond), err)

	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
	is.NoErr(err)
	is.Equal(len(pods.Items), 0) // nothing was made
}

// tpuJob is a Kueue-admitted Job in LocalQueue "team" of priority class
// prio: two pods of 4 chips on v6e 2x4 hosts, each sleeping for d.
func tpuJob(name, prio string, d time.Duration) *batchv1.Job {
	pod := kubeharness.NewTestProgramPod(name, "sleep", d.String())
	// On-demand hosts: the selector picks the ClusterQueue's flavor.
	pod.Spec.NodeSelector = map[string]string{"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-tpu-topology": "2x4",
		kubeharness.LabelProvisioning: "standard"}
	q := resource.MustParse("4")
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{kubeharness.ResourceTPU: q}, Limits: corev1.ResourceList{kubeharness.ResourceTPU: q}}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{labelKueueQueue: "team", labelKueuePriority: prio}},
		Spec: batchv1.JobSpec{
			Parallelism: new(int32(2)), Completions: new(int32(2)), BackoffLimit: new(int32(0)),
			Suspend:  new(true), // Kueue's webhook would suspend it anyway
			Template: corev1.PodTemplateSpec{Spec: pod.Spec},
		},
	}
}

// TestE2EKueueSharesClusterQueue: a goray driver in LocalQueue mode and
// Kueue-admitted Jobs share one ClusterQueue of 8 chips. goray's
// reservation waits while a Job holds the quota, saying where it stands,
// and runs once the Job is done; a higher-priority Job preempts it: its
// work fails with Unavailable at once, and its next reservation waits and
// runs once that Job is done. The ClusterQueue never admits more than its
// 8 chips, and nothing is left after release: no pod, Workload or Lease.
func TestE2EKueueSharesClusterQueue(t *testing.T) {
	is := is.New(t)
	cp, k := kueueHarness(t)
	ctx := t.Context()
	jobs := cp.Client().BatchV1().Jobs("default")

	// The ClusterQueue's usage, sampled throughout.
	var mu sync.Mutex
	maxUsage := int64(0)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		for sampleCtx.Err() == nil {
			if u, err := k.ClusterQueueUsage(sampleCtx, "tpu"); err == nil {
				mu.Lock()
				maxUsage = max(maxUsage, u["on-demand"]+u["spot"])
				mu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	b, c := kueueDriver(t, driverConfig(t, cp), "team", "low")
	// The Job runs long enough for the short reservation below to give up
	// while it holds the quota, however loaded the machine.
	_, err := jobs.Create(ctx, tpuJob("first", "low", 8*time.Second), metav1.CreateOptions{})
	is.NoErr(err)
	waitJobAdmitted(t, cp, "first")
	// A reservation that gives up while Kueue holds it says where it stood.
	short := kueueSlice
	short.Timeout = 1500 * time.Millisecond
	_, err = ray.NewSlicePlacementGroup(ctx, c, short)
	is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
	is.True(strings.Contains(err.Error(), "for Kueue to admit workload default/goray-")) // what it waited for
	is.True(strings.Contains(err.Error(), "LocalQueue default/team, ClusterQueue tpu"))  // in which queue
	is.True(strings.Contains(err.Error(), "insufficient unused quota"))                  // and Kueue's reason
	t.Logf("gave up: %v", err)
	t0 := time.Now()
	spec := kueueSlice
	spec.Timeout = time.Minute
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	is.NoErr(err)
	waited := time.Since(t0)
	first, err := jobs.Get(ctx, "first", metav1.GetOptions{})
	is.NoErr(err)
	is.True(first.Status.Succeeded == 2) // goray's pods ran only once the Job was done
	t.Logf("goray's reservation waited %v for the Job holding the quota", waited.Round(time.Millisecond))

	// A higher-priority Job preempts goray's workload; its work fails at
	// once with Unavailable.
	release := filepath.Join(t.TempDir(), "release")
	done := make(chan error, 1)
	go func() {
		_, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: release})
		done <- err
	}()
	is.NoErr(waitRunning(ctx, c, 2))
	_, err = jobs.Create(ctx, tpuJob("urgent", "high", 3*time.Second), metav1.CreateOptions{})
	is.NoErr(err)
	t1 := time.Now()
	select {
	case err := <-done:
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.True(strings.Contains(err.Error(), "Kueue stopped")) // says who stopped it
		t.Logf("preempted: the work failed %v after the high-priority Job was created: %v", time.Since(t1).Round(time.Millisecond), err)
	case <-time.After(time.Minute):
		t.Fatal("the preempted work did not fail")
	}
	is.NoErr(spg.Release(ctx))

	// The next reservation waits for the urgent Job and says so.
	t2 := time.Now()
	spg, err = ray.NewSlicePlacementGroup(ctx, c, kueueSlice)
	is.NoErr(err)
	urgent, err := jobs.Get(ctx, "urgent", metav1.GetOptions{})
	is.NoErr(err)
	is.True(urgent.Status.Succeeded == 2)
	t.Logf("readmitted %v after asking again", time.Since(t2).Round(time.Millisecond))
	is.NoErr(os.WriteFile(release, nil, 0o644))
	got, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: release, Add: 10})
	is.NoErr(err)
	is.Equal(got[0]+got[1], 21)
	is.NoErr(spg.Release(ctx))
	is.NoErr(c.Close())
	_ = b

	// Nothing left: no pod of goray's, no Workload, no Lease.
	is.NoErr(wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
		if err != nil {
			return false, err
		}
		wls, err := k.Workloads(ctx, "default")
		if err != nil {
			return false, err
		}
		var goray []string
		for _, w := range wls {
			if strings.HasPrefix(w.GetName(), "goray-") {
				goray = append(goray, w.GetName())
			}
		}
		leases, err := cp.Client().CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0 && len(goray) == 0 && len(leases.Items) == 0, nil
	}))
	stopSampling()
	sampling.Wait()
	is.True(maxUsage <= 8) // never oversubscribed
	t.Logf("the ClusterQueue admitted at most %d of its 8 chips at once", maxUsage)
}

// waitJobAdmitted waits until Kueue unsuspended Job name and its pods run.
func waitJobAdmitted(t *testing.T, cp *kubeharness.ControlPlane, name string) {
	t.Helper()
	_, err := cp.WaitForPods(t.Context(), "default", "job-name="+name, 2, func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	if err != nil {
		t.Fatalf("Job %s not admitted and running: %v", name, err)
	}
	_ = fmt.Sprint
}

// TestE2EKueueTrainResumesAfterPreemption: a train run in LocalQueue mode
// is preempted by a higher-priority Job at its fifth iteration: the
// attempt fails with Unavailable naming Kueue, the run reserves its slice
// again, which waits in the queue until the Job is done, and resumes from
// its checkpoint to the exact answer; nothing is left after.
func TestE2EKueueTrainResumesAfterPreemption(t *testing.T) {
	is := is.New(t)
	cp, k := kueueHarness(t)
	ctx := t.Context()
	// Pods on the loopback network share the test's: they reach the
	// driver's rendezvous on 127.0.0.1.
	_, c := kueueDriver(t, driverConfig(t, cp), "team", "low", func(cfg *Config) { cfg.DriverHost = "127.0.0.1" })
	jobs := cp.Client().BatchV1().Jobs("default")
	var jobErr error
	var preempted time.Time
	inject := func(r train.Report) {
		if r.Attempt == 0 && r.Iteration == 5 && preempted.IsZero() {
			preempted = time.Now()
			_, jobErr = jobs.Create(ctx, tpuJob("urgent", "high", 3*time.Second), metav1.CreateOptions{})
		}
	}
	// 35 iterations after the Job is created (7 s): Kueue preempts within
	// a fraction of a second here, so the run cannot end first.
	const iters = 40
	tr, err := train.New(c, k8sCounting, k8sCountCfg{Iters: iters, Pause: 200 * time.Millisecond},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4},
		train.RunConfig{Name: "preempted", Progress: train.ProgressOff, MaxFailures: 1, OnReport: inject})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.NoErr(jobErr)
	is.Equal(res.Metrics["sum"], float64(iters*3)) // exact, as without the preemption
	is.Equal(res.Attempts, 2)
	is.Equal(len(res.Failures), 1)
	f := res.Failures[0]
	is.Equal(ray.CodeOf(f.Err), ray.Unavailable)
	is.True(strings.Contains(f.Err.Error(), "Kueue stopped")) // says Kueue preempted it
	urgent, err := jobs.Get(ctx, "urgent", metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(urgent.Status.Succeeded, int32(2)) // the Job ran first
	t.Logf("preempted at iteration 5, resumed from checkpoint %d once readmitted; run took %v after the Job was created: %v",
		f.ResumeFrom, time.Since(preempted).Round(100*time.Millisecond), f.Err)
	is.NoErr(c.Close())
	is.NoErr(wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
		if err != nil {
			return false, err
		}
		wls, err := k.Workloads(ctx, "default")
		if err != nil {
			return false, err
		}
		for _, w := range wls {
			if strings.HasPrefix(w.GetName(), "goray-") {
				return false, nil
			}
		}
		return len(pods.Items) == 0, nil
	}))
}

// TestE2EKueueManagesEveryPod: on a cluster whose Kueue manages every pod
// (manageJobsWithoutQueueName, as xpk sets it), a driver without the
// LocalQueue mode fails its reservation at once with FailedPrecondition
// naming Kueue's gate, and a driver in the mode runs on the slice.
func TestE2EKueueManagesEveryPod(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	k, err := cp.StartKueue(ctx, &kubeharness.KueueOptions{ManageJobsWithoutQueueName: true})
	is.NoErr(err)
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4,
		Labels: kubeharness.OnDemandLabels()})
	is.NoErr(err)
	is.NoErr(k.AddQueue(ctx, kubeharness.KueueQueue{ClusterQueue: "tpu", LocalQueue: "team",
		Flavors: []kubeharness.KueueFlavor{kubeharness.OnDemandFlavor(8)}}))
	rc := driverConfig(t, cp)

	_, c := kueueDriver(t, rc, "", "")
	t0 := time.Now()
	_, err = ray.NewSlicePlacementGroup(ctx, c, kueueSlice)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	is.True(strings.Contains(err.Error(), "kueue.x-k8s.io/admission")) // names the gate
	is.True(strings.Contains(err.Error(), "Config.Kueue.LocalQueue"))  // and what to set
	is.True(time.Since(t0) < 30*time.Second)                           // at once, not after Worker.StartTimeout
	t.Logf("without the mode (%v): %v", time.Since(t0).Round(time.Millisecond), err)
	is.NoErr(c.Close())

	_, c = kueueDriver(t, rc, "team", "")
	spg, err := ray.NewSlicePlacementGroup(ctx, c, kueueSlice)
	is.NoErr(err)
	release := filepath.Join(t.TempDir(), "release")
	is.NoErr(os.WriteFile(release, nil, 0o644))
	got, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: release, Add: 10})
	is.NoErr(err)
	is.Equal(got[0]+got[1], 21)
	is.NoErr(spg.Release(ctx))

	// A CPU task's pod is queued too: a pod group of its own in the
	// LocalQueue, admitted (it requests nothing the ClusterQueue counts),
	// where without it Kueue would gate it for ever.
	// (Once the reservation's pods are gone: a task placed on a host while
	// its released reservation's worker is still being closed can fail.)
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelReservation))
	pod, err := k8sSay.Remote(ctx, c, "a CPU task").Get(ctx)
	is.NoErr(err)
	cpuPods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster + "," + labelKueueQueue + "=team"})
	is.NoErr(err)
	is.Equal(len(cpuPods.Items), 1)
	is.Equal(cpuPods.Items[0].Name, pod) // the task ran in it
	hasWorkload := func(name string) bool {
		wls, err := k.Workloads(ctx, "default")
		is.NoErr(err)
		for _, w := range wls {
			if w.GetName() == name {
				return true
			}
		}
		return false
	}
	is.True(hasWorkload(pod)) // its Workload, named as the pod
	is.NoErr(c.Close())
	is.NoErr(wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return !hasWorkload(pod), nil
	})) // and gone with it

	// A CPU pod requesting what the ClusterQueue has no quota of could
	// never be admitted: FailedPrecondition at once, naming it.
	_, c = kueueDriver(t, rc, "team", "", func(cfg *Config) { cfg.Worker.CPU = "100m" })
	t0 = time.Now()
	_, err = k8sSay.Remote(ctx, c, "never").Get(ctx)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	is.True(strings.Contains(err.Error(), "requests cpu, which ClusterQueue tpu"))
	is.True(time.Since(t0) < 30*time.Second)
	t.Logf("a CPU pod the ClusterQueue cannot admit (%v): %v", time.Since(t0).Round(time.Millisecond), err)
}

// TestE2EKueueServeReplicaReadmitted: a serve deployment's replica in
// LocalQueue mode is preempted by a higher-priority Job: serve replaces
// it, the new replica's reservation waits in the queue until the Job is
// done, and the deployment serves again from it.
func TestE2EKueueServeReplicaReadmitted(t *testing.T) {
	is := is.New(t)
	cp, _ := kueueHarness(t)
	ctx := t.Context()
	_, c := kueueDriver(t, driverConfig(t, cp), "team", "low", func(cfg *Config) { cfg.DriverHost = "127.0.0.1" })
	srv, base := serveProcess(t, c, func(d *serve.Deployment) { d.MinReplicas, d.Idempotent = 1, true })
	get := func() int {
		resp, err := http.Post(base+"/proc/where", "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	is.Equal(get(), http.StatusOK)
	jobs := cp.Client().BatchV1().Jobs("default")
	_, err := jobs.Create(ctx, tpuJob("urgent", "high", 3*time.Second), metav1.CreateOptions{})
	is.NoErr(err)
	is.NoErr(srv.WaitStatus(ctx, func(s serve.Status) bool {
		d, _ := s.Deployment("proc")
		return d.ReplicaFailures >= 1
	})) // the preempted replica is lost
	is.NoErr(srv.WaitStatus(ctx, func(s serve.Status) bool {
		d, _ := s.Deployment("proc")
		return d.Ready == 1
	})) // and replaced once Kueue readmits it
	urgent, err := jobs.Get(ctx, "urgent", metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(urgent.Status.Succeeded, int32(2)) // after the Job
	is.Equal(get(), http.StatusOK)
	is.NoErr(srv.Shutdown(ctx))
}
