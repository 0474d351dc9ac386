package kubernetes

import (
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// deadHandle creates what a handle of cluster id leaves behind: its token
// Secret and Service, a worker pod on each slice, and a CPU pod.
func deadHandle(t *testing.T, client *fake.Clientset, id string, slices ...string) {
	t.Helper()
	ctx := t.Context()
	name := dnsName("goray", id)
	lbl := map[string]string{LabelCluster: id, labelManagedBy: managedBy}
	_, err := client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		pl := map[string]string{LabelCluster: id, LabelSlice: s, labelManagedBy: managedBy}
		_, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + s, Labels: pl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-cpu", Labels: lbl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func podNames(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	list, err := client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}

// TestLeasesTakeoverCollectsDeadHandle: a driver that takes over the
// expired Lease of a dead handle deletes that handle's worker pods on the
// slice (which would hold its TPU chips for Worker.IdleTimeout) and, as
// the dead handle holds no live Lease, its Secret (the owner of the rest)
// and Service.
func TestLeasesTakeoverCollectsDeadHandle(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	a.cluster = "ca"
	b := newTestLeases(t, client, "driver-b", clk)
	b.cluster = "cb"
	is.NoErr(a.Claim(t.Context(), "pg-a", []string{"s1"}))
	deadHandle(t, client, "ca", "s1")
	clk.advance(a.duration) // driver-a was SIGKILLed: its Lease expires

	is.NoErr(b.Claim(t.Context(), "pg-b", []string{"s1"}))
	is.Equal(podNames(t, client), []string{"goray-ca-cpu"}) // the slice's pod is gone at once; the CPU pod goes with its owner
	_, err := client.CoreV1().Secrets("default").Get(t.Context(), "goray-ca", metav1.GetOptions{})
	is.True(err != nil) // the dead handle's Secret is deleted (owner of the rest)
	_, err = client.CoreV1().Services("default").Get(t.Context(), "goray-ca", metav1.GetOptions{})
	is.True(err != nil)
}

// TestLeasesTakeoverKeepsLiveHandle: a handle that still holds a live
// Lease (it gave up one slice's renewals only) keeps its Secret and its
// other pods; only its pods on the taken slice go.
func TestLeasesTakeoverKeepsLiveHandle(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	a.cluster = "ca"
	b := newTestLeases(t, client, "driver-b", clk)
	b.cluster = "cb"
	is.NoErr(a.Claim(t.Context(), "pg-1", []string{"s1"}))
	clk.advance(a.duration / 2)
	is.NoErr(a.Claim(t.Context(), "pg-2", []string{"s2"})) // renewed later: alive
	deadHandle(t, client, "ca", "s1", "s2")
	clk.advance(a.duration / 2)

	is.NoErr(b.Claim(t.Context(), "pg-b", []string{"s1"}))
	is.Equal(podNames(t, client), []string{"goray-ca-cpu", "goray-ca-s2"})
	_, err := client.CoreV1().Secrets("default").Get(t.Context(), "goray-ca", metav1.GetOptions{})
	is.NoErr(err) // still alive: nothing else of it is touched
}
