package kubernetes

import (
	"context"
	"errors"
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

// TestLeasesOutageKeepsLease: a driver that cannot renew a Lease (the
// API server does not answer) keeps it, for longer than the Lease
// duration: nobody else could take it over through an API server that does
// not answer. When the API server answers again, the renewal with the
// resourceVersion this driver read succeeds, which proves that nobody took
// it meanwhile. Renewals are retried every retryEvery while they fail.
func TestLeasesOutageKeepsLease(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	a.onLost = func(slice string, cause error) { t.Errorf("lost %s: %v", slice, cause) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	is.Equal(a.nextRenewal(), a.renew)

	heal := partition(client)
	for range 4 {
		clk.advance(a.renew)
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		a.RenewAll(ctx) // fails: the API server does not answer
		cancel()
		is.Equal(a.nextRenewal(), a.retryEvery()) // tried again soon
	}
	is.True(4*a.renew > a.duration)    // past the Lease's expiry
	is.Equal(a.Held(), []string{"s1"}) // still held
	heal()
	a.RenewAll(t.Context())
	is.Equal(a.nextRenewal(), a.renew)
	is.Equal(a.Held(), []string{"s1"})
	l, err := getLease(t, client, "s1")
	is.NoErr(err)
	is.True(l.Spec.RenewTime.Time.Equal(clk.now()))
}

// TestLeasesPodLossAfterOutageIsLeaseLoss: worker pods lost while the
// Lease has gone unrenewed past lostAfter mean the Lease is lost (another
// driver may have taken it over and deleted them): the slice is reported
// lost with an error that says so. Before lostAfter, a lost pod is only a
// lost pod.
func TestLeasesPodLossAfterOutageIsLeaseLoss(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	var lost []string
	a.onLost = func(slice string, cause error) { lost = append(lost, slice+": "+cause.Error()) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	f := a.lostAfter()
	is.True(a.renew < f && f < a.duration) // after a missed renewal, before the expiry

	partition(client)
	clk.advance(a.renew)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	a.RenewAll(ctx)
	cancel()
	is.NoErr(a.LostOnPodLoss("s1", errors.New("worker pod p1 was deleted"))) // nobody can have taken it yet
	is.Equal(len(lost), 0)
	clk.advance(f - a.renew)
	err := a.LostOnPodLoss("s1", errors.New("worker pod p1 was deleted"))
	is.True(err != nil)
	is.Equal(len(lost), 1)
	is.True(strings.Contains(lost[0], `s1: lost the Lease default/goray-slice-s1 of TPU slice "s1": its worker pods are gone (worker pod p1 was deleted) while the Lease could not be renewed for 6.667s`))
	is.True(strings.Contains(lost[0], "last error: "))
	is.Equal(a.Held(), []string(nil))
	is.NoErr(a.LostOnPodLoss("s2", errors.New("not held"))) // a slice not held: nothing to say
}

// TestLeasesRenewLoopRetriesPromptly: while renewals fail the loop tries
// again every retryEvery, so a Lease is renewed within moments of the API
// server answering again, not at the next RenewEvery.
func TestLeasesRenewLoopRetriesPromptly(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	cfg := testConfig()
	cfg.Identity = "driver-a"
	cfg.Lease.Duration = 2 * time.Second
	a, err := NewLeases(client, cfg)
	is.NoErr(err)
	a.onLost = func(slice string, cause error) { t.Errorf("lost %s: %v", slice, cause) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	heal := partition(client)
	var mu sync.Mutex
	updates := 0
	// Counts the renewals tried (ahead of the partition's reactor).
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		updates++
		mu.Unlock()
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.renewLoop(ctx); close(done) }()
	// Wait until renewals have failed for longer than the Lease.
	for {
		mu.Lock()
		n := updates
		mu.Unlock()
		if n > int(a.duration/a.retryEvery()) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	is.Equal(a.Held(), []string{"s1"}) // kept through the outage
	heal()
	for {
		l, err := getLease(t, client, "s1")
		is.NoErr(err)
		if time.Since(l.Spec.RenewTime.Time) < a.duration/2 {
			break // renewed again
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	is.Equal(a.Held(), []string{"s1"})
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
		is.NoErr(a.LostOnPodLoss("s1", errors.New("pod gone")))
	}
	is.Equal(a.Held(), []string{"s1"})
}
