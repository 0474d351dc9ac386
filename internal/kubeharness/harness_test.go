//go:build e2e

package kubeharness_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// These tests start a real control plane; they build only with -tags e2e
// and skip unless GORAY_E2E=1 (make e2e sets both).

func tpuPod(t *testing.T, name, generation, topology string, chips int, args ...string) *corev1.Pod {
	t.Helper()
	sel, err := kubeharness.TPUSelector(generation, topology)
	if err != nil {
		t.Fatal(err)
	}
	pod := kubeharness.NewTestProgramPod(name, args...)
	pod.Spec.NodeSelector = sel
	q := *resource.NewQuantity(int64(chips), resource.DecimalSI)
	pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{kubeharness.ResourceTPU: q},
		Requests: corev1.ResourceList{kubeharness.ResourceTPU: q},
	}
	return pod
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func isPhase(phases ...corev1.PodPhase) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		if p == nil {
			return false
		}
		for _, ph := range phases {
			if p.Status.Phase == ph {
				return true
			}
		}
		return false
	}
}

func isGone(p *corev1.Pod) bool { return p == nil }

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestSchedulerPlacesTPUPods: kube-scheduler puts pods with GKE TPU node
// selectors and google.com/tpu requests on the matching node pool, and an
// over-asking pod stays Pending with the scheduler's reason.
func TestSchedulerPlacesTPUPods(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	c := cp.Client()

	pools := []kubeharness.NodePool{
		{Name: "v6e-4x4", Generation: "v6e", Topology: "4x4"},       // 4 hosts × 4 chips
		{Name: "v5e-2x4", Generation: "v5e", Topology: "2x4"},       // 1 host × 8 chips
		{Name: "v4-2x2x2", Generation: "v4", Topology: "2x2x2"},     // 2 hosts × 4 chips
		{Name: "v7x-2x2x1", Generation: "tpu7x", Topology: "2x2x1"}, // 1 host × 4 chips
	}
	nodesOf := map[string]map[string]bool{}
	for _, p := range pools {
		nodes, err := cp.AddTPUNodePool(ctx, p)
		is.NoErr(err)
		nodesOf[p.Name] = map[string]bool{}
		for _, n := range nodes {
			nodesOf[p.Name][n.Name] = true
		}
	}
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 2})
	is.NoErr(err)
	is.Equal(len(nodesOf["v6e-4x4"]), 4)
	is.Equal(len(nodesOf["v4-2x2x2"]), 2)

	type want struct {
		pod  *corev1.Pod
		pool string
	}
	var placed []want
	for i := range 4 {
		placed = append(placed, want{tpuPod(t, fmt.Sprintf("v6e-worker-%d", i), "v6e", "4x4", 4, "sleep"), "v6e-4x4"})
	}
	placed = append(placed,
		want{tpuPod(t, "v5e-worker", "v5e", "2x4", 8, "sleep"), "v5e-2x4"},
		want{tpuPod(t, "v4-worker-0", "v4", "2x2x2", 4, "sleep"), "v4-2x2x2"},
		want{tpuPod(t, "v4-worker-1", "v4", "2x2x2", 4, "sleep"), "v4-2x2x2"},
		want{tpuPod(t, "v7x-worker", "v7x", "2x2x1", 4, "sleep"), "v7x-2x2x1"},
	)
	for _, w := range placed {
		_, err := c.CoreV1().Pods("default").Create(ctx, w.pod, metav1.CreateOptions{})
		is.NoErr(err)
	}
	// More chips per pod than any v6e host has.
	_, err = c.CoreV1().Pods("default").Create(ctx, tpuPod(t, "v6e-greedy", "v6e", "4x4", 16, "sleep"), metav1.CreateOptions{})
	is.NoErr(err)

	used := map[string]bool{}
	for _, w := range placed {
		p, err := cp.WaitForPod(ctx, "default", w.pod.Name, isPhase(corev1.PodRunning))
		is.NoErr(err)
		is.True(nodesOf[w.pool][p.Spec.NodeName]) // placed on its slice's node pool
		is.True(!used[p.Spec.NodeName])           // every pod takes a whole host
		used[p.Spec.NodeName] = true
	}

	p, err := cp.WaitForPod(ctx, "default", "v6e-greedy", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return true
			}
		}
		return false
	})
	is.NoErr(err)
	is.Equal(p.Status.Phase, corev1.PodPending)
	is.Equal(p.Spec.NodeName, "")
	var cond corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			cond = c
		}
	}
	is.Equal(cond.Reason, corev1.PodReasonUnschedulable)
	t.Logf("scheduler: %s", cond.Message)
	is.True(strings.Contains(cond.Message, "Insufficient google.com/tpu"))                       // the scheduler's reason
	is.True(strings.Contains(cond.Message, "node(s) didn't match Pod's node affinity/selector")) // other pools
}

// TestPodProcessExitCodeBecomesPhase: a placed pod's container really runs
// as a local process with the pod's env and IP; its exit code becomes the
// container state and the pod phase.
func TestPodProcessExitCodeBecomesPhase(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	c := cp.Client()
	nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	nodeIP := map[string]string{}
	for _, n := range nodes {
		nodeIP[n.Name] = n.Status.Addresses[0].Address
	}

	for _, tc := range []struct {
		name  string
		code  int
		phase corev1.PodPhase
	}{{"exit-zero", 0, corev1.PodSucceeded}, {"exit-three", 3, corev1.PodFailed}} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			pod := tpuPod(t, tc.name, "v6e", "2x4", 4, "exit", fmt.Sprint(tc.code))
			_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
			is.NoErr(err)
			p, err := cp.WaitForPod(ctx, "default", tc.name, isPhase(corev1.PodSucceeded, corev1.PodFailed))
			is.NoErr(err)
			is.Equal(p.Status.Phase, tc.phase) // exit code → phase
			st := p.Status.ContainerStatuses[0]
			is.True(st.State.Terminated != nil)
			is.Equal(int(st.State.Terminated.ExitCode), tc.code)
			is.Equal(p.Status.HostIP, nodeIP[p.Spec.NodeName])
			logs, err := cp.PodLogs("default", tc.name, "")
			is.NoErr(err)
			is.True(strings.Contains(logs, fmt.Sprintf("pod %s exiting with %d", tc.name, tc.code)))
			proc, err := cp.PodProcess("default", tc.name, "main")
			is.NoErr(err)
			code, exited := proc.ExitCode()
			is.True(exited)
			is.Equal(code, tc.code)
		})
	}

	t.Run("running", func(t *testing.T) {
		is := is.New(t)
		pod := tpuPod(t, "env-then-sleep", "v6e", "2x4", 4)
		pod.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "env | sort; exec sleep 600"}
		pod.Spec.Containers[0].Image = "busybox:1.36"
		pod.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "GREETING", Value: "hello from $(POD_NAME)"},
			{Name: "MY_NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "MY_MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		}
		pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Mi")
		_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		is.NoErr(err)
		p, err := cp.WaitForPod(ctx, "default", pod.Name, isPhase(corev1.PodRunning))
		is.NoErr(err)
		ip, err := netip.ParseAddr(p.Status.PodIP)
		is.NoErr(err)
		is.True(ip.IsLoopback())               // its own 127.x.y.z
		is.True(p.Status.PodIP != "127.0.0.1") // not the shared one
		is.True(p.Status.ContainerStatuses[0].State.Running != nil)
		is.True(p.Status.ContainerStatuses[0].Ready)
		proc, err := cp.PodProcess("default", pod.Name, "")
		is.NoErr(err)
		is.True(alive(proc.PID)) // a real process
		is.Equal(proc.IP, p.Status.PodIP)
		var logs string
		for !strings.Contains(logs, "MY_NODE=") { // the shell prints env right after start
			logs, err = cp.PodLogs("default", pod.Name, "main")
			is.NoErr(err)
			select {
			case <-ctx.Done():
				t.Fatalf("no env in logs: %q", logs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		for _, want := range []string{
			"POD_IP=" + p.Status.PodIP, "POD_NAME=env-then-sleep", "NODE_NAME=" + p.Spec.NodeName,
			"HOST_IP=" + p.Status.HostIP, "GREETING=hello from env-then-sleep", "MY_NODE=" + p.Spec.NodeName, "MY_MEM_MI=64",
		} {
			is.True(strings.Contains(logs, want)) // downward env
		}

		// Deleting the pod (graceful, as kubectl does) stops the process
		// with SIGTERM and removes the pod.
		is.NoErr(c.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}))
		code, err := proc.Wait(ctx)
		is.NoErr(err)
		is.Equal(code, 128+int(syscall.SIGTERM))
		_, err = cp.WaitForPod(ctx, "default", pod.Name, isGone)
		is.NoErr(err)
		is.True(!alive(proc.PID))
	})

	t.Run("unknown image", func(t *testing.T) {
		is := is.New(t)
		pod := tpuPod(t, "no-such-image", "v6e", "2x4", 4)
		pod.Spec.Containers[0].Image = "example.com/not-in-table:v1"
		_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		is.NoErr(err)
		p, err := cp.WaitForPod(ctx, "default", pod.Name, func(p *corev1.Pod) bool {
			return p != nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImagePull"
		})
		is.NoErr(err)
		is.Equal(p.Status.Phase, corev1.PodPending)
		is.True(strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, kubeharness.ImageTestProgram))
	})
}

// TestPodsReachEachOtherOverPodIPs: two pods of one node pool, on two
// hosts, talk over their pod IPs.
func TestPodsReachEachOtherOverPodIPs(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	c := cp.Client()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice", Generation: "v5p", Topology: "2x2x2"})
	is.NoErr(err)

	_, err = c.CoreV1().Pods("default").Create(ctx, tpuPod(t, "server", "v5p", "2x2x2", 4, "serve", "8080"), metav1.CreateOptions{})
	is.NoErr(err)
	server, err := cp.WaitForPod(ctx, "default", "server", isPhase(corev1.PodRunning))
	is.NoErr(err)

	url := fmt.Sprintf("http://%s:8080/", server.Status.PodIP)
	_, err = c.CoreV1().Pods("default").Create(ctx, tpuPod(t, "client", "v5p", "2x2x2", 4, "get", url, "60s"), metav1.CreateOptions{})
	is.NoErr(err)
	client, err := cp.WaitForPod(ctx, "default", "client", isPhase(corev1.PodSucceeded, corev1.PodFailed))
	is.NoErr(err)
	logs, _ := cp.PodLogs("default", "client", "")
	is.Equal(client.Status.Phase, corev1.PodSucceeded) // the GET got through
	is.True(client.Spec.NodeName != server.Spec.NodeName)
	is.True(client.Status.PodIP != server.Status.PodIP)
	is.True(strings.Contains(logs, fmt.Sprintf("pod=server ip=%s", server.Status.PodIP)))
	serverLogs, err := cp.PodLogs("default", "server", "")
	is.NoErr(err)
	is.True(strings.Contains(serverLogs, "request from "+client.Status.PodIP+":")) // from the client's pod IP
}

// TestDeletingNodeStopsItsPods: deleting a node kills its pods' processes
// and removes the pods, as the pod garbage collector would; pods elsewhere
// keep running.
func TestDeletingNodeStopsItsPods(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	c := cp.Client()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)

	procs := map[string]*kubeharness.PodProcess{}
	nodeOf := map[string]string{}
	for i := range 4 { // 2 chips each: two pods per 4-chip host
		name := fmt.Sprintf("worker-%d", i)
		_, err := c.CoreV1().Pods("default").Create(ctx, tpuPod(t, name, "v6e", "2x4", 2, "sleep"), metav1.CreateOptions{})
		is.NoErr(err)
	}
	for i := range 4 {
		name := fmt.Sprintf("worker-%d", i)
		p, err := cp.WaitForPod(ctx, "default", name, isPhase(corev1.PodRunning))
		is.NoErr(err)
		procs[name], err = cp.PodProcess("default", name, "")
		is.NoErr(err)
		is.True(alive(procs[name].PID))
		nodeOf[name] = p.Spec.NodeName
	}
	victim := nodeOf["worker-0"]
	is.NoErr(c.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}))
	for name, proc := range procs {
		if nodeOf[name] != victim {
			continue
		}
		code, err := proc.Wait(ctx) // the process stops
		is.NoErr(err)
		is.Equal(code, 128+int(syscall.SIGKILL))
		is.True(!alive(proc.PID))
		_, err = cp.WaitForPod(ctx, "default", name, isGone)
		is.NoErr(err)
	}
	for name, proc := range procs {
		if nodeOf[name] == victim {
			continue
		}
		is.True(alive(proc.PID)) // the other host's pods are untouched
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		is.NoErr(err)
		is.Equal(p.Status.Phase, corev1.PodRunning)
	}
}

// TestKwokThousandTPUNodes: a kwok-backed cluster of 1,000 TPU nodes comes
// up, and the scheduler places on it.
func TestKwokThousandTPUNodes(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 5*time.Minute)
	c := cp.Client()

	start := time.Now()
	total := 0
	for i := range 15 { // 15 × v6e 16x16 = 960 hosts
		nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: fmt.Sprintf("big-%d", i), Generation: "v6e", Topology: "16x16", Kwok: true})
		is.NoErr(err)
		total += len(nodes)
	}
	for i := range 10 { // 10 × v6e 2x8 = 40 hosts
		nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: fmt.Sprintf("small-%d", i), Generation: "v6e", Topology: "2x8", Kwok: true})
		is.NoErr(err)
		total += len(nodes)
	}
	is.Equal(total, 1000)
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: kubeharness.LabelTPUAccelerator + "=tpu-v6e-slice"})
	is.NoErr(err)
	is.Equal(len(list.Items), 1000)
	t.Logf("1000 kwok TPU nodes created in %v", time.Since(start).Round(time.Millisecond))

	// A whole 16x16 slice: 64 pods × 4 chips on pool big-7.
	start = time.Now()
	for i := range 64 {
		pod := tpuPod(t, fmt.Sprintf("slice-worker-%d", i), "v6e", "16x16", 4)
		pod.Labels = map[string]string{"job": "slice"}
		pod.Spec.NodeSelector[kubeharness.LabelNodePool] = "big-7"
		_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		is.NoErr(err)
	}
	pods, err := cp.WaitForPods(ctx, "default", "job=slice", 64, isPhase(corev1.PodRunning))
	is.NoErr(err)
	hosts := map[string]bool{}
	for _, p := range pods {
		is.True(strings.HasPrefix(p.Spec.NodeName, "big-7-"))
		hosts[p.Spec.NodeName] = true
	}
	is.Equal(len(hosts), 64) // one pod per host of the slice
	t.Logf("64 pods Running on kwok nodes in %v", time.Since(start).Round(time.Millisecond))
}

// TestRestartsInitContainersAndConfigEnv: restartPolicy OnFailure restarts
// a failed container (restartCount, lastState), init containers run first
// and in order, and env comes from ConfigMaps and Secrets.
func TestRestartsInitContainersAndConfigEnv(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 2*time.Minute)
	c := cp.Client()
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	_, err = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"MODE": "fast", "LEVEL": "3"},
	}, metav1.CreateOptions{})
	is.NoErr(err)
	_, err = c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: map[string][]byte{"token": []byte("s3cret")},
	}, metav1.CreateOptions{})
	is.NoErr(err)

	sh := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", Command: []string{"/bin/sh", "-c", script}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyOnFailure,
			InitContainers: []corev1.Container{
				sh("init-1", `echo one > "$HOME/order"`),
				sh("init-2", `echo two >> "$HOME/order"`),
			},
			Containers: []corev1.Container{func() corev1.Container {
				// Fails on its first run, succeeds on the second.
				c := sh("main", `cat "$HOME/order"; echo "mode=$MODE level=$CFG_LEVEL token=$TOKEN"; `+
					`if [ -f "$HOME/ran" ]; then exit 0; fi; touch "$HOME/ran"; exit 1`)
				c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}, Prefix: "CFG_"}}
				c.Env = []corev1.EnvVar{
					{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "MODE"}}},
					{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
				}
				return c
			}()},
		},
	}
	_, err = c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	is.NoErr(err)
	p, err := cp.WaitForPod(ctx, "default", "lifecycle", isPhase(corev1.PodSucceeded, corev1.PodFailed))
	is.NoErr(err)
	is.Equal(p.Status.Phase, corev1.PodSucceeded)
	for _, ic := range p.Status.InitContainerStatuses {
		is.True(ic.State.Terminated != nil && ic.State.Terminated.ExitCode == 0) // init containers completed
	}
	st := p.Status.ContainerStatuses[0]
	is.Equal(st.RestartCount, int32(1))                // restarted once after exit 1
	is.True(st.LastTerminationState.Terminated != nil) // the failed run
	is.Equal(st.LastTerminationState.Terminated.ExitCode, int32(1))
	is.Equal(st.State.Terminated.ExitCode, int32(0))
	logs, err := cp.PodLogs("default", "lifecycle", "main")
	is.NoErr(err)
	is.Equal(logs, "one\ntwo\nmode=fast level=3 token=s3cret\n") // init order, ConfigMap and Secret env
	proc, err := cp.PodProcess("default", "lifecycle", "main")
	is.NoErr(err)
	is.Equal(proc.Restarts, 1)
}
