package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

type lostRecorder struct {
	mu   sync.Mutex
	lost map[string]string
	ch   chan string
}

func (l *lostRecorder) report(node string, cause error) {
	l.mu.Lock()
	l.lost[node] = cause.Error()
	l.mu.Unlock()
	l.ch <- node
}

// startRunner starts a runner on a fake clientset with a fake kubelet.
func startRunner(t *testing.T, image string) (*Runner, backend.Executor, *fake.Clientset, *lostRecorder) {
	t.Helper()
	client := newFakeClient()
	k := startKubelet(t, client, "default")
	cfg := testConfig()
	cfg.Worker.Image = image
	cfg.Worker.Port = int32(k.port)
	cfg.Worker.StartTimeout = 10 * time.Second
	r, err := NewRunner(client, cfg, ClusterID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	lost := &lostRecorder{lost: map[string]string{}, ch: make(chan string, 16)}
	exec, err := r.Start(t.Context(), echoExec{}, lost.report)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, exec, client, lost
}

func v6eHosts(r *Runner, t *testing.T, pool string) []string {
	t.Helper()
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 4)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, n := range tpuNodes(pool, "tpu-v6e-slice", "4x4", 4, 4) {
		if err := r.NodeUp(t.Context(), hostNode(shape, pool, i, n)); err != nil {
			t.Fatal(err)
		}
		names = append(names, n.Name)
	}
	return names
}

func hostEnv(hosts []string) map[string]map[string]string { return hostEnvNamed(hosts, hosts) }

// hostEnvNamed is the env of each host (by node name) whose workers are
// reached by names, as the runtime derives it.
func hostEnvNamed(hosts, names []string) map[string]map[string]string {
	env := map[string]map[string]string{}
	for i, h := range hosts {
		env[h] = map[string]string{
			tpu.EnvWorkerID: string(rune('0' + i)), tpu.EnvWorkerHostnames: strings.Join(names, ","),
			envMegascaleCoordinator: names[0] + ":8081",
		}
	}
	return env
}

func TestRunnerReservedStartsOnePodPerHost(t *testing.T) {
	is := is.New(t)
	r, exec, client, _ := startRunner(t, "example.com/app")
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}
	is.NoErr(r.Reserved(ctx, claim, hostEnvNamed(hosts, r.HostNames(claim)[0])))

	secret, err := client.CoreV1().Secrets("default").Get(ctx, "goray-c1", metav1.GetOptions{})
	is.NoErr(err)
	token := string(secret.Data[secretTokenKey])
	svc, err := client.CoreV1().Services("default").Get(ctx, "goray-c1", metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(svc.Spec.ClusterIP, corev1.ClusterIPNone)

	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelReservation + "=pg-1"})
	is.NoErr(err)
	is.Equal(len(pods.Items), 4)
	for _, p := range pods.Items {
		j, _ := json.Marshal(p)
		is.True(!strings.Contains(string(j), token)) // the token is never a literal in the pod
		c := p.Spec.Containers[0]
		is.Equal(c.Resources.Requests[resourceTPU], c.Resources.Limits[resourceTPU])
		tpuLimit := c.Resources.Limits[resourceTPU]
		is.Equal(tpuLimit.Value(), int64(4))
		term := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
		is.Equal(term.MatchFields[0].Values, []string{p.Labels[LabelNode]}) // pinned to its node
		is.Equal(p.OwnerReferences[0].UID, secret.UID)                      // collected with the Secret
		is.Equal(p.Labels[LabelCluster], "c1")
		is.Equal(p.Spec.Subdomain, "goray-c1")
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		wid := p.Labels[LabelWorkerID]
		is.Equal(env[tpu.EnvWorkerID], wid)
		is.Equal(env[tpu.EnvWorkerHostnames], "r1-s0-w0.goray-c1.default.svc,r1-s0-w1.goray-c1.default.svc,r1-s0-w2.goray-c1.default.svc,r1-s0-w3.goray-c1.default.svc")
		is.Equal(env[envMegascaleCoordinator], "r1-s0-w0.goray-c1.default.svc:8081")
		is.Equal(p.Spec.Hostname, "r1-s0-w"+wid)
	}

	// The reservation's work on a host runs in its pod.
	v, err := exec.RunTask(ctx, "echo", backend.Value{Data: []byte("hi")}, &backend.RuntimeInfo{Node: hosts[2], Placement: backend.Placement{Group: 1}})
	is.NoErr(err)
	is.Equal(string(v.Data), hosts[2]+":2:hi")

	// Released deletes the pods.
	r.Released(claim)
	pods, err = client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelReservation + "=pg-1"})
	is.NoErr(err)
	is.Equal(len(pods.Items), 0)

	// Close deletes the Secret and the Service.
	is.NoErr(r.Close())
	_, err = client.CoreV1().Secrets("default").Get(ctx, "goray-c1", metav1.GetOptions{})
	is.True(apierrors.IsNotFound(err))
	_, err = client.CoreV1().Services("default").Get(ctx, "goray-c1", metav1.GetOptions{})
	is.True(apierrors.IsNotFound(err))
}

// Work on a reserved host that is not the reservation's (no placement in
// its group, no chips) runs in the node's CPU pod, not in the
// reservation's pod: the release, which deletes that pod, neither stops it
// nor catches work placed there while it runs.
func TestRunnerWorkBesideAReservation(t *testing.T) {
	is := is.New(t)
	r, exec, client, _ := startRunner(t, "example.com/app")
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	claim := cluster.Claim{ID: "pg-7", Slices: []string{"a"}, Hosts: [][]string{hosts}}
	is.NoErr(r.Reserved(ctx, claim, hostEnvNamed(hosts, r.HostNames(claim)[0])))
	run := func(info *backend.RuntimeInfo, data string) (string, error) {
		v, err := exec.RunTask(ctx, "echo", backend.Value{Data: []byte(data)}, info)
		return string(v.Data), err
	}
	inGroup := &backend.RuntimeInfo{Node: hosts[1], Placement: backend.Placement{Group: 7}, Resources: backend.Resources{backend.TPU: 4}}
	outside := &backend.RuntimeInfo{Node: hosts[1], Resources: backend.Resources{backend.CPU: 1}}
	got, err := run(inGroup, "pg")
	is.NoErr(err)
	is.Equal(got, hosts[1]+":1:pg") // the reservation's pod, with its host's env
	got, err = run(outside, "cpu")
	is.NoErr(err)
	is.Equal(got, hosts[1]+"::cpu") // the node's CPU pod

	// Held in its worker while the reservation is released: it returns.
	key, hold := echoHolds.add()
	held := make(chan error, 1)
	go func() {
		_, err := run(outside, "hold:"+key)
		held <- err
	}()
	select {
	case <-hold.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the held task did not start")
	}
	r.Released(claim)
	close(hold.release)
	is.NoErr(<-held)
	got, err = run(outside, "after")
	is.NoErr(err)
	is.Equal(got, hosts[1]+"::after")
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelNode + "=" + hosts[1]})
	is.NoErr(err)
	is.Equal(len(pods.Items), 1) // the CPU pod; the reservation's is gone
	is.Equal(pods.Items[0].Labels[LabelReservation], "")

	// A host claimed for chips outside reservations (a one-host sub-slice
	// claim): work holding chips runs in the claim's pod, which holds them.
	hostClaim := cluster.Claim{ID: "chips-8", Slices: []string{"a"}, Hosts: [][]string{{hosts[2]}}, Subslice: true}
	is.NoErr(r.Reserved(ctx, hostClaim, map[string]map[string]string{hosts[2]: {tpu.EnvWorkerID: "2"}}))
	got, err = run(&backend.RuntimeInfo{Node: hosts[2], Resources: backend.Resources{backend.TPU: 1}}, "chip")
	is.NoErr(err)
	is.Equal(got, hosts[2]+":2:chip")
	got, err = run(&backend.RuntimeInfo{Node: hosts[2], Resources: backend.Resources{backend.CPU: 1}}, "cpu")
	is.NoErr(err)
	is.Equal(got, hosts[2]+"::cpu")
	r.Released(hostClaim)
}

func TestRunnerCPUPodAtFirstUseAndLoss(t *testing.T) {
	is := is.New(t)
	r, exec, client, lost := startRunner(t, "example.com/app")
	ctx := t.Context()
	is.NoErr(r.NodeUp(ctx, cpuNode(cpuNodeObj("cpu-1"))))
	v, err := exec.RunTask(ctx, "echo", backend.Value{Data: []byte("x")}, &backend.RuntimeInfo{Node: "cpu-1"})
	is.NoErr(err)
	is.Equal(string(v.Data), "cpu-1::x")
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelNode + "=cpu-1"})
	is.NoErr(err)
	is.Equal(len(pods.Items), 1)
	is.Equal(len(pods.Items[0].Spec.Containers[0].Resources.Limits), 0) // no TPU on CPU pods

	// Someone deletes the pod: the node is lost.
	is.NoErr(client.CoreV1().Pods("default").Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}))
	select {
	case node := <-lost.ch:
		is.Equal(node, "cpu-1")
	case <-time.After(10 * time.Second):
		t.Fatal("no loss reported")
	}
	lost.mu.Lock()
	// The watch or the dropped connection reports it, whichever is first.
	is.True(lost.lost["cpu-1"] != "")
	lost.mu.Unlock()

	// The next work starts a new pod.
	_, err = exec.RunTask(ctx, "echo", backend.Value{}, &backend.RuntimeInfo{Node: "cpu-1"})
	is.NoErr(err)
}

// A worker's connection often breaks before the driver's watch brings its
// pod's update (the worker exits on SIGTERM as soon as the pod is being
// deleted): the loss still says what happened to the pod, and that Kueue
// stopped it, read from the API server at the break.
func TestRunnerConnectionLossSaysWhyThePodStopped(t *testing.T) {
	kueuePod := func(name string) *corev1.Pod {
		now := metav1.Now()
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", DeletionTimestamp: &now, Finalizers: []string{"test/keep"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{
				Type: kueueTerminationTarget, Status: corev1.ConditionTrue, Reason: "Preempted",
				Message: "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
			}}},
		}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod // in the API server at the break; nil: none
		want []string    // in the reported cause
	}{
		{"preempted by Kueue", kueuePod("w-1"), []string{"worker pod w-1 is being deleted: Kueue stopped the reservation's workload (Preempted: Preempted to accommodate", "(its connection: read tcp: connection reset by peer)"}},
		{"deleted", nil, []string{"worker pod w-1 was deleted", "(its connection: read tcp: connection reset by peer)"}},
		{"still running", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-1", Namespace: "default"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			[]string{"connection reset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			client := newFakeClient()
			if tc.pod != nil {
				_, err := client.CoreV1().Pods("default").Create(t.Context(), tc.pod, metav1.CreateOptions{})
				is.NoErr(err)
			}
			r, err := NewRunner(client, testConfig(), "c1")
			is.NoErr(err)
			lost := &lostRecorder{lost: map[string]string{}, ch: make(chan string, 1)}
			r.lost = lost.report
			w := &podWorker{name: "w-1", node: "cpu-1", ready: make(chan struct{}), changed: make(chan struct{}, 1)}
			close(w.ready)
			r.mu.Lock()
			r.byPod[w.name], r.cpuPods[w.node] = w, w
			r.mu.Unlock()
			r.connLost(w, errors.New("read tcp: connection reset by peer"))
			is.Equal(<-lost.ch, "cpu-1")
			got := lost.lost["cpu-1"]
			t.Logf("reported: %s", got)
			for _, want := range tc.want {
				is.True(strings.Contains(got, want)) // the cause says what happened
			}
			if tc.pod != nil && tc.pod.DeletionTimestamp == nil {
				is.Equal(strings.Contains(got, "worker pod"), false) // a running pod is not said to be gone
			}
			is.NoErr(r.Close())
		})
	}
}

func TestRunnerReservedFailsWholeOnBadImage(t *testing.T) {
	is := is.New(t)
	r, _, client, _ := startRunner(t, "bad")
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	err := r.Reserved(ctx, cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}, hostEnv(hosts))
	is.True(err != nil)
	is.Equal(backend.CodeOf(err), backend.Unavailable)
	is.True(strings.Contains(err.Error(), "ErrImagePull: no such image")) // names the pod's problem
	pods, lerr := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	is.NoErr(lerr)
	is.Equal(len(pods.Items), 0) // nothing left behind
}

func TestRunnerNeedsManifest(t *testing.T) {
	is := is.New(t)
	r, err := NewRunner(newFakeClient(), testConfig(), "c1")
	is.NoErr(err)
	_, err = r.Start(context.Background(), plainExec{}, nil)
	is.Equal(backend.CodeOf(err), backend.InvalidArgument)
	is.True(strings.Contains(err.Error(), "executor of package ray"))
}

type plainExec struct{ echoExec }

func (plainExec) WorkerManifest() {} // hides echoExec's: not a worker.Describer

// TestRunnerCloseDeletesCollection: Close deletes the handle's pods with
// one DeleteCollection on the cluster label, and one by one when the
// identity may not delete collections.
func TestRunnerCloseDeletesCollection(t *testing.T) {
	for _, forbidden := range []bool{false, true} {
		t.Run(map[bool]string{false: "DeleteCollection", true: "Forbidden"}[forbidden], func(t *testing.T) {
			is := is.New(t)
			r, exec, client, _ := startRunner(t, "example.com/app")
			ctx := t.Context()
			hosts := v6eHosts(r, t, "a")
			is.NoErr(r.Reserved(ctx, cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}, hostEnv(hosts)))
			is.NoErr(r.NodeUp(ctx, cpuNode(cpuNodeObj("cpu-1"))))
			_, err := exec.RunTask(ctx, "echo", backend.Value{}, &backend.RuntimeInfo{Node: "cpu-1"})
			is.NoErr(err)
			if forbidden {
				client.PrependReactor("delete-collection", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New("no deletecollection verb"))
				})
			}
			before := len(client.Actions())
			is.NoErr(r.Close())
			var collections, deletes int
			for _, a := range client.Actions()[before:] {
				if a.GetResource().Resource != "pods" {
					continue
				}
				switch a.GetVerb() {
				case "delete-collection":
					collections++
					is.Equal(a.(clienttesting.DeleteCollectionAction).GetListRestrictions().Labels.String(), LabelCluster+"=c1")
				case "delete":
					deletes++
				}
			}
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			is.NoErr(err)
			is.Equal(len(pods.Items), 0) // nothing left
			is.Equal(collections, 1)
			if forbidden {
				is.Equal(deletes, 5) // the fallback: 4 TPU pods and a CPU pod, one by one
			} else {
				is.Equal(deletes, 0) // one call, not one per pod
			}
		})
	}
}

// TestRunnerCPUPoolFollowsDemand: CPU pods start when work is placed on
// their node and are deleted once idle for CPUPool.IdleTimeout, down to
// CPUPool.Min; a pod with work in flight stays.
func TestRunnerCPUPoolFollowsDemand(t *testing.T) {
	is := is.New(t)
	client := newFakeClient()
	k := startKubelet(t, client, "default")
	cfg := testConfig()
	cfg.Worker.Port, cfg.Worker.StartTimeout = int32(k.port), 10*time.Second
	cfg.CPUPool.Min, cfg.CPUPool.IdleTimeout = 1, time.Hour // scaled by hand below
	r, err := NewRunner(client, cfg, "c1")
	is.NoErr(err)
	exec, err := r.Start(t.Context(), echoExec{}, func(string, error) {})
	is.NoErr(err)
	t.Cleanup(func() { _ = r.Close() })
	ctx := t.Context()
	countPods := func() int {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		is.NoErr(err)
		return len(pods.Items)
	}
	nodes := []string{"cpu-1", "cpu-2", "cpu-3"}
	for _, n := range nodes {
		is.NoErr(r.NodeUp(ctx, cpuNode(cpuNodeObj(n))))
	}
	// Demand on every node: a pod each (cpu-1's started with the cluster).
	for _, n := range nodes {
		_, err := exec.RunTask(ctx, "echo", backend.Value{}, &backend.RuntimeInfo{Node: n})
		is.NoErr(err)
	}
	is.Equal(countPods(), 3)
	is.Equal(r.scaleDownIdle(time.Now()), 0) // not idle long enough

	// Work in flight on cpu-2 and cpu-3 keeps their pods; the idle one goes.
	_, done2, err := r.workerFor(ctx, &backend.RuntimeInfo{Node: "cpu-2"})
	is.NoErr(err)
	_, done3, err := r.workerFor(ctx, &backend.RuntimeInfo{Node: "cpu-3"})
	is.NoErr(err)
	is.Equal(r.scaleDownIdle(time.Now().Add(2*time.Hour)), 1)
	is.Equal(countPods(), 2)
	done2()
	done3()
	is.Equal(r.scaleDownIdle(time.Now().Add(4*time.Hour)), 1) // down to Min 1
	is.Equal(countPods(), 1)
	is.Equal(r.scaleDownIdle(time.Now().Add(8*time.Hour)), 0)

	// Demand again: pods start again on the nodes it is placed on.
	for _, n := range nodes {
		_, err := exec.RunTask(ctx, "echo", backend.Value{}, &backend.RuntimeInfo{Node: n})
		is.NoErr(err)
	}
	is.Equal(countPods(), 3)
}

// A capacity pod that the source kept for a claim (a worker pod in
// waiting on a host of the claim) becomes that host's worker pod: the
// host is named by the pod's DNS name, no pod is created for it, the
// host's env reaches the worker in the handshake, and the pod takes the
// worker pod's labels and loses the capacity label. Released deletes it
// with the others.
func TestRunnerAdoptsCapacityPod(t *testing.T) {
	is := is.New(t)
	r, exec, client, _ := startRunner(t, "example.com/app")
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	// The source's pod: the runner's template as a worker pod in waiting.
	src := &Source{prov: provConfig().withDefaults().Provision, workerPod: r.pt.pod}
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 4)
	is.NoErr(err)
	standby := src.standbyPod("goray-capacity-x-0", 2, shape)
	_, err = client.CoreV1().Pods("default").Create(ctx, standby, metav1.CreateOptions{})
	is.NoErr(err)
	r.adoptions = func(id string) map[string]string {
		if id == "pg-1" {
			return map[string]string{hosts[2]: standby.Name}
		}
		return nil
	}
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}
	names := r.HostNames(claim)[0]
	is.Equal(names[2], standby.Name+".goray-c1.default.svc")
	is.Equal(names[1], "r1-s0-w1.goray-c1.default.svc")
	created := r.created.Load()
	is.NoErr(r.Reserved(ctx, claim, hostEnvNamed(hosts, names)))
	is.Equal(r.created.Load()-created, int64(3)) // one pod per host but the adopted one

	p, err := client.CoreV1().Pods("default").Get(ctx, standby.Name, metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(p.Labels[LabelReservation], "pg-1")
	is.Equal(p.Labels[LabelWorkerID], "2")
	is.Equal(p.Labels[LabelNode], hosts[2])
	_, capacity := p.Labels[labelCapacity]
	is.True(!capacity)
	// kubectl shows the env the worker got, which the pod spec lacks.
	is.True(strings.Contains(p.Annotations[AnnotationWorkerEnv], "\n"+tpu.EnvWorkerHostnames+"="+strings.Join(names, ",")+"\n"))
	is.True(strings.Contains(p.Annotations[AnnotationWorkerEnv], tpu.EnvWorkerID+"=2"))
	// The worker reads its TPU_WORKER_ID from the env the driver sent.
	v, err := exec.RunTask(ctx, "echo", backend.Value{Data: []byte("hi")}, &backend.RuntimeInfo{Node: hosts[2], Placement: backend.Placement{Group: 1}})
	is.NoErr(err)
	is.Equal(string(v.Data), hosts[2]+":2:hi")

	r.Released(claim)
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	is.NoErr(err)
	for _, p := range pods.Items {
		is.True(p.Labels[LabelReservation] != "pg-1") // every pod of the claim deleted, the adopted one too
	}
}

// A capacity pod of this handle that the scheduler bound to a claimed host
// after the claim looked holds the chips the host's new worker pod needs,
// and does not give way (its class never preempts): the runner deletes it
// while the worker pod waits to be placed.
func TestRunnerDeletesCapacityBoundAfterTheClaim(t *testing.T) {
	is := is.New(t)
	r, _, client, _ := startRunner(t, "unschedulable")
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "goray-capacity-late-0-1", Labels: map[string]string{
		labelCapacity: "goray-capacity-late-0", LabelCluster: "c1"}},
		Spec: corev1.PodSpec{NodeName: hosts[1], Containers: []corev1.Container{{Name: "capacity", Image: "unschedulable"}}}}
	_, err := client.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{})
	is.NoErr(err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- r.Reserved(rctx, cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}, hostEnv(hosts))
	}()
	is.NoErr(wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, late.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}))
	cancel()
	is.True(<-done != nil) // the worker pods were never placed (the fake has no scheduler)
}

// A reservation's pod that cannot start any more fails the reservation
// at once, not after Worker.StartTimeout: its node was lost (a Spot
// slice preempted while its pods start) or the pod was deleted.
func TestRunnerStartFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		stop       func(r *Runner, client *fake.Clientset, hosts []string) error
	}{
		{"node lost", "was lost while its worker pod started", func(r *Runner, _ *fake.Clientset, hosts []string) error {
			r.NodeDown(hosts[2])
			return nil
		}},
		{"pod deleted", "was deleted", func(r *Runner, client *fake.Clientset, hosts []string) error {
			pods, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: LabelWorkerID + "=1"})
			if err != nil || len(pods.Items) != 1 {
				return fmt.Errorf("pods of worker 1: %v, %v", pods, err)
			}
			return client.CoreV1().Pods("default").Delete(context.Background(), pods.Items[0].Name, metav1.DeleteOptions{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			r, _, client, _ := startRunner(t, "unschedulable") // pending until stopped; StartTimeout 10 s
			ctx := t.Context()
			hosts := v6eHosts(r, t, "a")
			done := make(chan error, 1)
			go func() {
				done <- r.Reserved(ctx, cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}, hostEnv(hosts))
			}()
			is.NoErr(wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
				pods, err := r.pods.Pods("default").List(labels.Everything())
				return err == nil && len(pods) == 4, nil
			}))
			t0 := time.Now()
			is.NoErr(tc.stop(r, client, hosts))
			select {
			case err := <-done:
				is.True(err != nil)
				is.Equal(backend.CodeOf(err), backend.Unavailable)
				is.True(strings.Contains(err.Error(), tc.want)) // says why
				is.True(time.Since(t0) < 3*time.Second)
			case <-time.After(8 * time.Second):
				t.Fatal("the reservation still waits for pods that cannot start")
			}
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			is.NoErr(err)
			is.Equal(len(pods.Items), 0) // nothing left behind
		})
	}
}

// TestRunnerKueueGateFailsAtOnce: in a namespace where Kueue gates every
// pod (its webhook adds the scheduling gate kueue.x-k8s.io/admission), a
// reservation's pods would wait for ever: the reservation fails at once
// with FailedPrecondition naming the gate, and leaves no pod.
func TestRunnerKueueGateFailsAtOnce(t *testing.T) {
	is := is.New(t)
	r, _, client, _ := startRunner(t, "example.com/app")
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.CreateAction).GetObject().(*corev1.Pod)
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: kueueGate})
		return false, nil, nil // the webhook's mutation; the tracker stores it
	})
	ctx := t.Context()
	hosts := v6eHosts(r, t, "a")
	err := r.Reserved(ctx, cluster.Claim{ID: "pg-1", Slices: []string{"a"}, Hosts: [][]string{hosts}}, hostEnv(hosts))
	is.True(err != nil)
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	is.True(strings.Contains(err.Error(), "scheduling gate kueue.x-k8s.io/admission"))
	pods, lerr := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	is.NoErr(lerr)
	is.Equal(len(pods.Items), 0) // nothing left behind
}
