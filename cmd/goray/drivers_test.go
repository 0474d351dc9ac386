package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/dashboard"
)

// goray status --kubeconfig finds a namespace's drivers from its slice
// Leases: one in a pod whose status endpoint answers (its summary is
// printed), one with no pod (said so).
func TestStatusFindsDrivers(t *testing.T) {
	is := is.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := openCluster(ctx, clusterFile)
	is.NoErr(err)
	defer c.Close()
	d, err := dashboard.New(c, &dashboard.Options{Token: "tok"})
	is.NoErr(err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	port := ln.Addr().(*net.TCPAddr).Port
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- d.Serve(sctx, ln) }()
	defer func() { stop(); is.NoErr(<-served) }()

	objs := append(gkeNodes("train-a", "tpu-v6e-slice", "4x4", 4), gkeNodes("train-b", "tpu-v6e-slice", "4x4", 4)...)
	objs = append(objs, gkeNodes("train-c", "tpu-v6e-slice", "4x4", 4)...)
	objs = append(objs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-0", Namespace: "ml"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}, &corev1.Pod{
		// A driver whose pod has exited, its Lease not yet lapsed: its IP
		// (here the live endpoint's) may be another pod's by now.
		ObjectMeta: metav1.ObjectMeta{Name: "old-driver", Namespace: "ml"},
		Status:     corev1.PodStatus{Phase: corev1.PodFailed, PodIP: "127.0.0.1"},
	})
	client := fake.NewClientset(objs...)
	for holder, slice := range map[string]string{"system:serviceaccount:ml:driver/trainer-0-x7k2q": "train-a", "bob-laptop-p0q9z": "train-b",
		"system:serviceaccount:ml:driver/old-driver-a1b2c": "train-c"} {
		leases, err := kubernetes.NewLeases(client, kubernetes.Config{Worker: kubernetes.WorkerConfig{Image: "example.com/app"}, Identity: holder, Namespace: "ml"})
		is.NoErr(err)
		is.NoErr(leases.Claim(ctx, "1", []string{slice}))
	}
	kubeClient = client
	t.Cleanup(func() { kubeClient = nil })

	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"status", "--kubeconfig", "unused", "--namespace", "ml", "--port", strconv.Itoa(port), "--token", "tok"}, &stdout, &stderr)
	is.Equal(code, exitOK)
	is.Equal(stderr.String(), "")
	out := stdout.String()
	for _, want := range []string{
		"== driver bob-laptop-p0q9z: holds train-b\n   no pod bob-laptop in namespace ml",
		"== driver system:serviceaccount:ml:driver/old-driver-a1b2c: holds train-c\n   pod old-driver has exited (Failed): the driver is gone; its Leases lapse unless renewed\n\n==",
		"== driver system:serviceaccount:ml:driver/trainer-0-x7k2q: holds train-a\n   pod trainer-0 (Running), status endpoint 127.0.0.1:" + strconv.Itoa(port),
		"   goray status at ",
		"   TPU slices",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code = run(ctx, []string{"status", "--kubeconfig", "unused", "--driver", "127.0.0.1:1"}, &stdout, &stderr)
	is.Equal(code, exitUsage) // one or the other
}
