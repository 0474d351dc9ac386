//go:build e2e

package kubeharness_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// finished waits for a pod of the test program to end and returns its
// phase and logs.
func finished(t *testing.T, cp *kubeharness.ControlPlane, ns, name string) (corev1.PodPhase, string) {
	t.Helper()
	p, err := cp.WaitForPod(ctxFor(t, time.Minute), ns, name, isPhase(corev1.PodSucceeded, corev1.PodFailed))
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := cp.PodLogs(ns, name, "")
	return p.Status.Phase, logs
}

// TestIsolatedNetwork: with NetworkIsolated each pod has its own network
// namespace. A pod reaches another by its headless-Service DNS name from
// CoreDNS (full and short, through the search path) and by pod IP; a
// server on 127.0.0.1 in one pod is reachable from that pod's other
// container and from no other pod; the test process reaches pods by IP and
// pods reach it at HostIP; a pod reaches the API server with client-go's
// in-cluster config (its ServiceAccount's token mounted as kubelet does);
// names outside cluster.local do not resolve; and every namespace is gone
// once the pods are.
func TestIsolatedNetwork(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, &kubeharness.Options{Network: kubeharness.NetworkIsolated})
	ctx := ctxFor(t, 3*time.Minute)
	c := cp.Client()
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 2})
	is.NoErr(err)

	_, err = c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": "web"},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 8080}},
		},
	}, metav1.CreateOptions{})
	is.NoErr(err)
	server := kubeharness.NewTestProgramPod("server", "serve", "8080")
	server.Labels = map[string]string{"app": "web"}
	server.Spec.Hostname, server.Spec.Subdomain = "w0", "web"
	// A second container serves on the pod's own loopback, and a third
	// reaches it there.
	server.Spec.Containers = append(server.Spec.Containers,
		corev1.Container{Name: "local", Image: kubeharness.ImageTestProgram, Args: []string{"serve", "9090", "127.0.0.1"}},
		corev1.Container{Name: "peer", Image: kubeharness.ImageTestProgram, Args: []string{"dial", "127.0.0.1:9090", "30s", "stay"}},
	)
	_, err = c.CoreV1().Pods("default").Create(ctx, server, metav1.CreateOptions{})
	is.NoErr(err)
	srv, err := cp.WaitForPod(ctx, "default", "server", isPhase(corev1.PodRunning, corev1.PodFailed))
	is.NoErr(err)
	if srv.Status.Phase != corev1.PodRunning {
		t.Fatalf("server pod: %s: %+v", srv.Status.Phase, srv.Status.ContainerStatuses)
	}
	is.True(strings.HasPrefix(srv.Status.PodIP, "10.")) // an address of the pod network, not loopback

	// The test process reaches the pod by its IP.
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + net.JoinHostPort(srv.Status.PodIP, "8080") + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET the server pod from the test process: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	is.Equal(body, fmt.Sprintf("pod=server ip=%s\n", srv.Status.PodIP))

	// Pods reach the test process at HostIP.
	l, err := net.Listen("tcp", net.JoinHostPort(cp.HostIP(), "0"))
	is.NoErr(err)
	defer l.Close()
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "driver\n") }))
	}()

	pods := map[string][]string{
		"by-fqdn":       {"get", "http://w0.web.default.svc.cluster.local:8080/", "30s"},
		"by-short-name": {"get", "http://w0.web:8080/", "30s"},
		"by-ip":         {"get", "http://" + net.JoinHostPort(srv.Status.PodIP, "8080") + "/", "30s"},
		"to-driver":     {"get", "http://" + l.Addr().String() + "/", "30s"},
		"other-lo":      {"dial", "127.0.0.1:9090", "2s"},
		"outside":       {"resolve", "example.com", "30s"}, // ends at the answer
		"whoami":        {"whoami"},
	}
	// The controller manager makes the namespace's default ServiceAccount,
	// whose token the agent mounts.
	for {
		if _, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, args := range pods {
		_, err := c.CoreV1().Pods("default").Create(ctx, kubeharness.NewTestProgramPod(name, args...), metav1.CreateOptions{})
		is.NoErr(err)
	}
	for _, name := range []string{"by-fqdn", "by-short-name", "by-ip"} {
		phase, logs := finished(t, cp, "default", name)
		if phase != corev1.PodSucceeded || !strings.Contains(logs, "pod=server ip="+srv.Status.PodIP) {
			t.Errorf("pod %s did not reach the server: %s\n%s", name, phase, logs)
		}
	}
	phase, logs := finished(t, cp, "default", "to-driver")
	is.Equal(phase, corev1.PodSucceeded) // reached the test process at HostIP
	is.True(strings.Contains(logs, "driver"))
	phase, logs = finished(t, cp, "default", "other-lo")
	if phase != corev1.PodFailed || !strings.Contains(logs, "connection refused") {
		t.Errorf("another pod's 127.0.0.1 should be its own, with nothing listening: %s\n%s", phase, logs)
	}
	phase, logs = finished(t, cp, "default", "whoami")
	if phase != corev1.PodSucceeded || !strings.Contains(logs, "whoami: system:serviceaccount:default:default") {
		t.Errorf("a pod should reach the API server with its in-cluster config: %s\n%s", phase, logs)
	}
	phase, logs = finished(t, cp, "default", "outside")
	if phase != corev1.PodFailed || !strings.Contains(logs, "no such host") {
		t.Errorf("nothing outside cluster.local should resolve: %s\n%s", phase, logs)
	}

	// The server pod's loopback server is there for its own containers.
	logs, _ = cp.PodLogs("default", "server", "peer")
	is.True(strings.Contains(logs, "dial 127.0.0.1:9090: connected")) // from a container of the same pod

	// Deleting the pods removes their namespaces.
	is.NoErr(c.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}))
	is.NoErr(cp.WaitForPodsGone(ctx, "default", ""))
	for deadline := time.Now().Add(10 * time.Second); len(cp.NetworkNamespaces()) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("network namespaces left after their pods: %v", cp.NetworkNamespaces())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, n := range cp.NetworkNamespaces() {
		_, err := os.Stat("/run/netns/" + n)
		is.True(os.IsNotExist(err))
	}
}

// TestControllerManager: the harness runs kube-controller-manager, so
// owner-reference garbage collection, Jobs and namespace deletion work as
// on every cluster.
func TestControllerManager(t *testing.T) {
	is := is.New(t)
	cp := kubeharness.Start(t, nil)
	ctx := ctxFor(t, 3*time.Minute)
	c := cp.Client()
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)

	t.Run("garbage collection", func(t *testing.T) {
		is := is.New(t)
		owner, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "owner"},
		}, metav1.CreateOptions{})
		is.NoErr(err)
		pod := kubeharness.NewTestProgramPod("owned", "sleep")
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: owner.Name, UID: owner.UID}}
		_, err = c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		is.NoErr(err)
		_, err = cp.WaitForPod(ctx, "default", "owned", isPhase(corev1.PodRunning))
		is.NoErr(err)
		is.NoErr(c.CoreV1().Secrets("default").Delete(ctx, "owner", metav1.DeleteOptions{}))
		_, err = cp.WaitForPod(ctx, "default", "owned", isGone) // collected with its owner
		is.NoErr(err)
	})

	t.Run("job", func(t *testing.T) {
		is := is.New(t)
		tmpl := kubeharness.NewTestProgramPod("", "exit", "0")
		job, err := c.BatchV1().Jobs("default").Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "once"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": "once"}},
				Spec:       tmpl.Spec,
			}},
		}, metav1.CreateOptions{})
		is.NoErr(err)
		for {
			j, err := c.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
			is.NoErr(err)
			if j.Status.Succeeded == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("job never succeeded: %+v", j.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("namespace deletion", func(t *testing.T) {
		is := is.New(t)
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scratch"}}, metav1.CreateOptions{})
		is.NoErr(err)
		pod := kubeharness.NewTestProgramPod("p", "sleep")
		pod.Namespace = "scratch"
		_, err = c.CoreV1().Pods("scratch").Create(ctx, pod, metav1.CreateOptions{})
		is.NoErr(err)
		_, err = cp.WaitForPod(ctx, "scratch", "p", isPhase(corev1.PodRunning))
		is.NoErr(err)
		is.NoErr(c.CoreV1().Namespaces().Delete(ctx, "scratch", metav1.DeleteOptions{}))
		_, err = cp.WaitForPod(ctx, "scratch", "p", isGone)
		is.NoErr(err)
		for {
			_, err := c.CoreV1().Namespaces().Get(ctx, "scratch", metav1.GetOptions{})
			if err != nil {
				break // gone, its pod stopped first
			}
			if ctx.Err() != nil {
				t.Fatal("namespace never went away")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
