package kubernetes

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// partition makes every Lease update fail as an unreachable API server's
// would, until the returned func heals it.
func partition(client interface {
	PrependReactor(verb, resource string, reaction k8stesting.ReactionFunc)
}) (heal func()) {
	var mu sync.Mutex
	cut := true
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if !cut {
			return false, nil, nil
		}
		return true, nil, apierrors.NewServerTimeout(leaseGR, "update", 1)
	})
	return func() { mu.Lock(); cut = false; mu.Unlock() }
}

// TestLeasesFenceBeforeExpiry: a driver that cannot renew a Lease stops
// using its slice once it can no longer be sure it holds it, before the
// Lease can expire (fenceAfter = 10 s of the 15 s default; here 6.67 s of
// 10 s), with an error that says the Lease was lost and why.
func TestLeasesFenceBeforeExpiry(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	var lost []string
	a.onLost = func(slice string, cause error) { lost = append(lost, slice+": "+cause.Error()) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	f := a.fenceAfter()
	is.True(a.renew < f && f < a.duration) // after a missed renewal, before the expiry

	partition(client)
	clk.advance(a.renew)
	a.RenewAll(t.Context()) // fails: the API server does not answer
	a.Fence()
	is.Equal(len(lost), 0) // one failed renewal is tolerated
	clk.advance(a.fenceAfter() - a.renew - time.Millisecond)
	a.Fence()
	is.Equal(len(lost), 0)
	clk.advance(time.Millisecond)
	a.Fence()
	is.Equal(len(lost), 1)
	is.True(strings.Contains(lost[0], `s1: lost the Lease default/goray-slice-s1 of TPU slice "s1": not renewed for 6.667s`))
	is.True(strings.Contains(lost[0], "last error: "))
	is.True(a.fenceAfter() < a.duration) // before anyone may take it over
	is.Equal(a.Held(), []string(nil))
}

// TestLeasesFenceInRenewLoop: the renewal loop fences on its own, while a
// renewal hangs or fails, so a partitioned driver's work on the slice
// fails within fenceAfter.
func TestLeasesFenceInRenewLoop(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	cfg := testConfig()
	cfg.Identity = "driver-a"
	cfg.Lease.Duration = time.Second
	a, err := NewLeases(client, cfg)
	is.NoErr(err)
	a.backoff.Duration = time.Millisecond
	lost := make(chan error, 1)
	a.onLost = func(slice string, cause error) { lost <- cause }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	partition(client)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.renewLoop(ctx); close(done) }()
	start := time.Now()
	select {
	case err := <-lost:
		is.True(strings.Contains(err.Error(), "lost the Lease"))
		is.True(time.Since(start) < a.duration) // before the Lease could expire
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal loop never fenced the partitioned Lease")
	}
	cancel()
	<-done
}

// TestLeasesRenewedNotFenced: renewals that succeed keep the Lease.
func TestLeasesRenewedNotFenced(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	a.onLost = func(slice string, cause error) { t.Errorf("lost %s: %v", slice, cause) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	for range 10 {
		clk.advance(a.renew)
		a.RenewAll(t.Context())
		a.Fence()
	}
	is.Equal(a.Held(), []string{"s1"})

}
