//go:build e2e

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// driverImage is the image the harness maps to this test binary: the
// driver pod of TestE2EStatusFindsDriver and its worker pods.
const driverImage = "goray.test/goray-status-driver"

// envStatusDriver set to 1 makes this test binary the driver program of
// TestE2EStatusFindsDriver (runStatusDriver) instead of running tests.
const envStatusDriver = "K8STEST_STATUS_DRIVER"

func init() {
	testProgram = func() {
		if os.Getenv(envStatusDriver) == "1" {
			runStatusDriver()
		}
	}
}

// runStatusDriver is a driver as docs/dashboard.md tells users to run one
// in a pod: the Kubernetes backend with an in-cluster Config, a v6e 2x2
// slice reserved, and its status endpoint served on its pod IP
// ($POD_IP:8265) with the token in $STATUS_TOKEN, until SIGUSR1. Its
// slice Lease lasts 10 minutes, so that it outlives the driver for the
// test. It runs until SIGTERM.
func runStatusDriver() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) {
		fmt.Println("driver failed:", err)
		os.Exit(1)
	}
	b, err := kubernetes.New(ctx, kubernetes.Config{Worker: kubernetes.WorkerConfig{StartTimeout: time.Minute},
		Lease: kubernetes.LeaseConfig{Duration: 10 * time.Minute}})
	if err != nil {
		fail(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fail(err)
	}
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "2x2", AcceleratorVersion: "v6e", Name: "status-e2e"})
	if err != nil {
		fail(err)
	}
	d, err := dashboard.New(c, &dashboard.Options{Token: os.Getenv("STATUS_TOKEN")})
	if err != nil {
		fail(err)
	}
	ln, err := dashboard.Listen(net.JoinHostPort(os.Getenv("POD_IP"), "8265"))
	if err != nil {
		fail(err)
	}
	// SIGUSR1 stops the endpoint; the driver goes on holding its slice.
	serveCtx, stopServing := signal.NotifyContext(ctx, syscall.SIGUSR1)
	defer stopServing()
	fmt.Println("serving the status of slice", spg.SliceNames())
	if err := d.Serve(serveCtx, ln); err != nil {
		fail(err)
	}
	fmt.Println("stopped serving")
	<-ctx.Done()
	spg.Release(context.Background())
	c.Close()
	os.Exit(0)
}

// TestE2EStatusFindsDriver runs goray status --kubeconfig against a real
// API server, as the driver's least-privilege ServiceAccount: a driver pod
// (network-isolated, as on a cluster) holds a v6e 2x2 slice and serves its
// status endpoint on its pod IP with a token; goray status finds it from
// the slice's Lease and its pod, and prints its summary. Then the driver
// stops serving (its pod runs, its endpoint refuses), then its process is
// killed (its Lease stays): each time goray status says it is gone, within
// seconds; then its pod is deleted and goray status says there is no pod.
func TestE2EStatusFindsDriver(t *testing.T) {
	is := is.New(t)
	exe, err := os.Executable()
	is.NoErr(err)
	cp := kubeharness.Start(t, &kubeharness.Options{Images: map[string]string{driverImage: exe}, Network: kubeharness.NetworkIsolated})
	ctx := t.Context()
	_, err = cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x2"})
	is.NoErr(err)
	_, err = cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	kubeconfig := driverKubeconfig(t, cp) // also applies deploy/rbac.yaml
	token, err := dashboard.NewToken()
	is.NoErr(err)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "default"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "goray-driver",
			RestartPolicy:      corev1.RestartPolicyNever,
			NodeSelector:       map[string]string{"cloud.google.com/gke-nodepool": "cpu"},
			Containers: []corev1.Container{{
				Name: "driver", Image: driverImage,
				Args: []string{"-test.run=^$"}, // the test binary: never its tests
				Env: []corev1.EnvVar{
					{Name: envStatusDriver, Value: "1"},
					{Name: "STATUS_TOKEN", Value: token},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
			}},
		},
	}
	_, err = cp.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	is.NoErr(err)
	waitForLog(t, cp, "trainer", "serving the status of slice") // it holds its slice and serves
	p, err := cp.Client().CoreV1().Pods("default").Get(ctx, "trainer", metav1.GetOptions{})
	is.NoErr(err)
	endpoint := net.JoinHostPort(p.Status.PodIP, "8265")

	status := func(args ...string) (string, time.Duration) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(ctx, append([]string{"status", "--kubeconfig", kubeconfig, "-n", "default"}, args...), &stdout, &stderr)
		took := time.Since(start)
		t.Logf("goray status %s (%v):\n%s%s", strings.Join(args, " "), took.Round(time.Millisecond), stdout.String(), stderr.String())
		is.Equal(stderr.String(), "")
		is.Equal(code, exitOK)
		return stdout.String(), took
	}
	out, _ := status("--token", token)
	for _, want := range []string{
		"== driver system:serviceaccount:default:goray-driver/trainer-", // the backend's identity in a pod
		": holds slice-a\n   pod trainer (Running), status endpoint " + endpoint + "\n",
		"   goray status at ",
		"   TPU slices",
		"v6e 2x2 (4 chips per host)  1 slice: 0 free, 0 busy, 1 reserved", // the driver's own view
		"status-e2e  1 slice: slice-a",                                    // its reservation
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	out, _ = status("--token", "wrong")
	is.True(strings.Contains(out, "refused the token (401)"))

	// The driver stops serving, holding its slice: its pod runs, its
	// endpoint refuses.
	pp, err := cp.PodProcess("default", "trainer", "")
	is.NoErr(err)
	is.NoErr(syscall.Kill(pp.PID, syscall.SIGUSR1))
	waitForLog(t, cp, "trainer", "stopped serving")
	out, took := status("--token", token, "--timeout", "3s")
	is.True(strings.Contains(out, ": holds slice-a\n   pod trainer (Running), status endpoint "+endpoint+"\n   the driver at "+endpoint+" is gone: "))
	is.True(took < 30*time.Second) // said, not hung

	// The driver process dies; its Lease stays (10 minutes).
	is.NoErr(syscall.Kill(pp.PID, syscall.SIGKILL))
	_, err = pp.Wait(ctx)
	is.NoErr(err)
	// At once (the pod may still be Running: its endpoint refuses) and
	// once the pod has failed (its IP may be another pod's by then, so it
	// is not dialled), the driver is said to be gone, within seconds.
	out, took = status("--token", token, "--timeout", "3s")
	is.True(strings.Contains(out, ": holds slice-a\n"))
	is.True(strings.Contains(out, "the driver at "+endpoint+" is gone") || strings.Contains(out, "pod trainer has exited (Failed): the driver is gone"))
	is.True(took < 30*time.Second) // said, not hung
	_, err = cp.WaitForPod(ctx, "default", "trainer", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodFailed })
	is.NoErr(err)
	out, took = status("--token", token, "--timeout", "3s")
	is.True(strings.Contains(out, ": holds slice-a\n   pod trainer has exited (Failed): the driver is gone"))
	is.True(took < 30*time.Second)

	// Its pod is deleted too: the Lease names a pod that is not there.
	is.NoErr(cp.Client().CoreV1().Pods("default").Delete(ctx, "trainer", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	_, err = cp.WaitForPod(ctx, "default", "trainer", func(p *corev1.Pod) bool { return p == nil })
	is.NoErr(err)
	out, took = status("--token", token, "--timeout", "3s")
	is.True(strings.Contains(out, ": holds slice-a\n   no pod trainer in namespace default"))
	is.True(took < 30*time.Second)
}

// waitForLog polls a pod's log for a line, up to two minutes.
func waitForLog(t *testing.T, cp *kubeharness.ControlPlane, pod, line string) {
	t.Helper()
	var logs string
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(logs, line); time.Sleep(100 * time.Millisecond) {
		logs, _ = cp.PodLogs("default", pod, "")
		if strings.Contains(logs, "driver failed") || time.Now().After(deadline) {
			t.Fatalf("pod %s did not log %q; its log:\n%s", pod, line, logs)
		}
	}
}
