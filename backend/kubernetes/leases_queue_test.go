package kubernetes

import (
	"errors"
	"k8s.io/client-go/kubernetes/fake"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend/cluster"
)

const testShape = "v6e/4x4/4"

// TestLeasesQueueNoStarvation: driver A's two-slice request, refused
// because B holds one of the slices, becomes the shape's head; B, which
// released its slice and cycles single-slice reservations, cannot take a
// slice of the shape again until A's request is granted. (Without the
// queue B's cycle could refuse A for ever: seen over 80 s on the harness.)
func TestLeasesQueueNoStarvation(t *testing.T) {
	is := is.New(t)
	client, clk, a, b := twoQueueDrivers(t)
	ctx := t.Context()

	is.NoErr(b.ClaimQueued(ctx, "b1", testShape, []string{"s1"}))
	err := a.ClaimQueued(ctx, "a1", testShape, []string{"s1", "s2"})
	var held *cluster.HeldError
	is.True(errors.As(err, &held)) // B holds s1: A waits, as the head
	is.Equal(held.Holder, "driver-b")
	_, err = getLease(t, client, "s2")
	is.True(err != nil) // all or nothing: A holds nothing meanwhile

	is.NoErr(b.Release(ctx, []string{"s1"}))
	err = b.ClaimQueued(ctx, "b2", testShape, []string{"s1"})
	is.True(errors.As(err, &held)) // B's next cycle waits behind A
	is.True(strings.Contains(held.Holder, "driver-a, which waits first for v6e/4x4/4 slices"))

	clk.advance(time.Second) // A's retry
	is.NoErr(a.ClaimQueued(ctx, "a1", testShape, []string{"s1", "s2"}))
	_, err = client.CoordinationV1().Leases("default").Get(ctx, QueueLeaseName(testShape), metav1.GetOptions{})
	is.True(err != nil) // granted: A left the queue

	is.NoErr(a.Release(ctx, []string{"s1", "s2"}))
	is.NoErr(b.ClaimQueued(ctx, "b3", testShape, []string{"s1"})) // B's turn
}

// TestLeasesQueueHeadGivesUp: a head that stops retrying (its request was
// cancelled, or its driver died) holds nobody up after queueTTL.
func TestLeasesQueueHeadGivesUp(t *testing.T) {
	is := is.New(t)
	_, clk, a, b := twoQueueDrivers(t)
	ctx := t.Context()
	is.NoErr(b.ClaimQueued(ctx, "b1", testShape, []string{"s1"}))
	is.True(a.ClaimQueued(ctx, "a1", testShape, []string{"s1", "s2"}) != nil) // A is the head
	is.NoErr(b.Release(ctx, []string{"s1"}))
	is.True(b.ClaimQueued(ctx, "b2", testShape, []string{"s1"}) != nil) // behind A
	clk.advance(queueTTL)                                               // A gave up
	is.NoErr(b.ClaimQueued(ctx, "b3", testShape, []string{"s1"}))
}

// TestLeasesQueuedClaimCalls: with no queue, a claim is the queue read and
// the slice's Lease created, nothing more (it read the queue a second
// time to leave a queue it was never in); the head that is granted still
// leaves the queue.
func TestLeasesQueuedClaimCalls(t *testing.T) {
	is := is.New(t)
	client, _, a, b := twoQueueDrivers(t)
	ctx := t.Context()
	leaseCalls := func() []string {
		var out []string
		for _, act := range client.Actions() {
			if act.GetResource().Resource == "leases" {
				out = append(out, act.GetVerb())
			}
		}
		client.ClearActions()
		return out
	}

	client.ClearActions()
	is.NoErr(a.ClaimQueued(ctx, "a1", testShape, []string{"s1"}))
	is.Equal(leaseCalls(), []string{"get", "create"})

	var held *cluster.HeldError
	is.True(errors.As(b.ClaimQueued(ctx, "b1", testShape, []string{"s1"}), &held)) // B queues
	is.NoErr(a.Release(ctx, []string{"s1"}))
	leaseCalls()
	is.NoErr(b.ClaimQueued(ctx, "b1", testShape, []string{"s1"}))
	is.Equal(leaseCalls(), []string{"get", "create", "get", "delete"}) // the head leaves the queue
	_, err := client.CoordinationV1().Leases("default").Get(ctx, QueueLeaseName(testShape), metav1.GetOptions{})
	is.True(err != nil)
}

// twoQueueDrivers returns a fake API server that checks Lease versions, a
// clock, and drivers A and B claiming through it.
func twoQueueDrivers(t *testing.T) (*fake.Clientset, *clock, *Leases, *Leases) {
	t.Helper()
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	return client, clk, newTestLeases(t, client, "driver-a", clk), newTestLeases(t, client, "driver-b", clk)
}
