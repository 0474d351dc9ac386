package kubernetes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend/cluster"
)

// runSourceWithLeases is runSource with slice Leases on clk for handle id.
func runSourceWithLeases(t *testing.T, client *fake.Clientset, cfg Config, id ClusterID, clk *clock) *Source {
	t.Helper()
	leases, err := NewLeases(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	leases.now = clk.now
	leases.backoff.Duration = time.Millisecond
	src, err := NewSource(client, cfg, id, leases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(ctx, newRecordSink()) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := src.Synced(t.Context()); err != nil {
		t.Fatal(err)
	}
	return src
}

// TestCapacityOfGoneRequesterIsCollected: capacity pods of another handle
// that ended on a fresh slice keep it for their requester while the
// requester's handle Lease lives. Once that Lease has expired and been
// seen so, unchanged, for handleConfirm (a live driver renews it within
// moments of an outage's end), the requester is gone: the claim removes
// what it left (its capacity pods, PodTemplate, Secret, Service and
// handle Lease) and gets the slice.
func TestCapacityOfGoneRequesterIsCollected(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	nodes := tpuNodes("pool-a", "tpu-v6e-slice", "2x4", 2, 4)
	for _, n := range nodes {
		n.CreationTimestamp = metav1.Now() // a slice that just appeared
	}
	client := checkVersions(newFakeClient(objects(nodes)...))
	clk := &clock{t: time.Now()}

	// The requester, c2, asked for the slice: its handle Lease, capacity
	// pods (ended: their worker gave up waiting), a PodTemplate, its
	// Secret and Service.
	cfg2 := provConfig()
	cfg2.Identity = "requester"
	req, err := NewLeases(client, cfg2)
	is.NoErr(err)
	req.now, req.cluster = clk.now, "c2"
	is.NoErr(req.ensureHandle(ctx))
	deadHandle(t, client, "c2")
	for _, n := range nodes {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cap-" + n.Name, Labels: map[string]string{labelCapacity: "g", LabelCluster: "c2"}}}
		p.Spec.NodeName = n.Name
		p.Status.Phase = corev1.PodSucceeded
		_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		is.NoErr(err)
	}
	_, err = client.CoreV1().PodTemplates("default").Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t", Labels: map[string]string{LabelCluster: "c2"}}}, metav1.CreateOptions{})
	is.NoErr(err)

	src := runSourceWithLeases(t, client, testConfig(), "c1", clk)
	claim := cluster.Claim{ID: "pg-1", Slices: []string{"pool-a"}}
	var held *cluster.HeldError
	is.True(errors.As(src.ClaimSlices(ctx, claim), &held)) // the requester lives

	// The requester was SIGKILLed: its handle Lease expires.
	clk.advance(req.duration)
	is.True(errors.As(src.ClaimSlices(ctx, claim), &held)) // seen expired once: not yet taken for gone
	clk.advance(src.leases.handleConfirm())
	is.NoErr(src.ClaimSlices(ctx, claim)) // gone: its leftovers removed, the slice claimed

	is.Equal(podNames(t, client), []string{"goray-c2-cpu"}) // its capacity pods are gone; the CPU pod goes with its owner, the Secret
	tmpls, err := client.CoreV1().PodTemplates("default").List(ctx, metav1.ListOptions{})
	is.NoErr(err)
	is.Equal(len(tmpls.Items), 0)
	_, err = client.CoreV1().Secrets("default").Get(ctx, "goray-c2", metav1.GetOptions{})
	is.True(err != nil)
	_, err = client.CoreV1().Services("default").Get(ctx, "goray-c2", metav1.GetOptions{})
	is.True(err != nil)
	_, err = client.CoordinationV1().Leases("default").Get(ctx, HandleLeaseName("c2"), metav1.GetOptions{})
	is.True(err != nil)
}

// TestHandleLeaseRenewedAndReleased: a handle that provisions holds its
// handle Lease, renews it with its slice Leases, makes it again if another
// driver collected it (it could not renew through an outage), and deletes
// it when its renewal loop ends.
func TestHandleLeaseRenewedAndReleased(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	l := newTestLeases(t, client, "driver-a", clk)
	l.cluster = "ca"
	is.NoErr(l.ensureHandle(ctx))
	clk.advance(l.renew)
	l.RenewAll(ctx)
	got, err := client.CoordinationV1().Leases("default").Get(ctx, HandleLeaseName("ca"), metav1.GetOptions{})
	is.NoErr(err)
	is.True(got.Spec.RenewTime.Time.Equal(clk.now()))
	is.True(!l.handleGone(ctx, "ca"))

	is.NoErr(client.CoordinationV1().Leases("default").Delete(ctx, HandleLeaseName("ca"), metav1.DeleteOptions{}))
	is.True(l.handleGone(ctx, "ca")) // absent: gone, at once
	l.RenewAll(ctx)
	_, err = client.CoordinationV1().Leases("default").Get(ctx, HandleLeaseName("ca"), metav1.GetOptions{})
	is.NoErr(err) // made again

	lctx, cancel := context.WithCancel(ctx)
	cancel()
	l.renewLoop(lctx)
	_, err = client.CoordinationV1().Leases("default").Get(ctx, HandleLeaseName("ca"), metav1.GetOptions{})
	is.True(err != nil) // deleted with the handle
}
