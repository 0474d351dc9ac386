//go:build e2e

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

func newE2ELeases(t *testing.T, client k8s.Interface, identity string, d time.Duration) *Leases {
	t.Helper()
	cfg := testConfig()
	cfg.Identity = identity
	cfg.Lease = LeaseConfig{Duration: d}
	l, err := NewLeases(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestE2ECompetingDrivers runs two drivers' claimers against one real
// apiserver, as the RBAC identity of deploy/rbac.yaml: they claim random
// sets of six slices (all or nothing) over and over, and a shared ledger
// checks that no slice is ever held by both; at the end no Lease is left.
// Then driver a "crashes" mid-reservation (holds one slice of a two-slice
// claim and stops renewing): b is refused until a's Lease expires, then
// gets both slices, and a, renewing again, learns it lost its slice.
func TestE2ECompetingDrivers(t *testing.T) {
	cp := startHarness(t)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	slices := []string{"s0", "s1", "s2", "s3", "s4", "s5"}

	t.Run("never held twice, none leaked", func(t *testing.T) {
		is := is.New(t)
		var mu sync.Mutex
		ledger := map[string]string{}
		var claims, refusals [2]int
		var wg sync.WaitGroup
		for d, id := range []string{"driver-a", "driver-b"} {
			l := newE2ELeases(t, client, id, 5*time.Second)
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(d), 7))
				for i := range 40 {
					want := []string{}
					for _, s := range slices {
						if rng.IntN(3) == 0 {
							want = append(want, s)
						}
					}
					if len(want) == 0 {
						continue
					}
					err := l.Claim(ctx, fmt.Sprintf("%s-%d", id, i), want)
					if err != nil {
						var held *cluster.HeldError
						if !errors.As(err, &held) {
							t.Errorf("%s: claim %v: %v", id, want, err)
							return
						}
						refusals[d]++
						continue
					}
					claims[d]++
					mu.Lock()
					for _, s := range want {
						if other := ledger[s]; other != "" {
							t.Errorf("slice %s held by %s and %s at once", s, other, id)
						}
						ledger[s] = id
					}
					mu.Unlock()
					// While held, the apiserver agrees.
					for _, s := range want {
						lease, err := client.CoordinationV1().Leases("default").Get(ctx, LeaseName(s), metav1.GetOptions{})
						if err != nil || *lease.Spec.HolderIdentity != id {
							t.Errorf("%s holds %s but the Lease says %v (%v)", id, s, lease, err)
						}
					}
					mu.Lock()
					for _, s := range want {
						delete(ledger, s)
					}
					mu.Unlock()
					if err := l.Release(ctx, want); err != nil {
						t.Errorf("%s: release: %v", id, err)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("claims granted: a %d, b %d; refused as held: a %d, b %d", claims[0], claims[1], refusals[0], refusals[1])
		is.True(claims[0] > 0 && claims[1] > 0)
		list, err := client.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
		if err == nil { // the driver role cannot list Leases: check each
			is.Equal(len(list.Items), 0)
		}
		for _, s := range slices {
			_, err := client.CoordinationV1().Leases("default").Get(ctx, LeaseName(s), metav1.GetOptions{})
			is.True(err != nil) // no Lease leaked
		}
	})

	t.Run("a crashed driver's slices go to the other after expiry", func(t *testing.T) {
		is := is.New(t)
		const d = 2 * time.Second
		a, b := newE2ELeases(t, client, "driver-a", d), newE2ELeases(t, client, "driver-b", d)
		var lost []string
		a.onLost = func(s string, _ error) { lost = append(lost, s) }
		// a holds s1 of its two-slice claim when it crashes: it never
		// renews, never releases.
		crashed := time.Now() // before a's renew time
		is.NoErr(a.Claim(ctx, "pg-a", []string{"s1"}))

		err := b.Claim(ctx, "pg-b", []string{"s0", "s1"})
		var held *cluster.HeldError
		is.True(errors.As(err, &held))
		is.Equal(held.Holder, "driver-a")
		is.Equal(backend.CodeOf(err), backend.ResourceExhausted)
		_, err = client.CoordinationV1().Leases("default").Get(ctx, LeaseName("s0"), metav1.GetOptions{})
		is.True(err != nil) // b's s0 was rolled back

		// b retries until the Lease expires.
		deadline, cancel := context.WithTimeout(ctx, 5*d)
		defer cancel()
		for {
			err = b.Claim(deadline, "pg-b", []string{"s0", "s1"})
			if err == nil || !errors.Is(err, backend.ErrResourceExhausted) {
				break
			}
			select {
			case <-deadline.Done():
				t.Fatalf("b never got the expired slices: %v", err)
			case <-time.After(100 * time.Millisecond): // retry period, not synchronisation
			}
		}
		is.NoErr(err)
		waited := time.Since(crashed)
		t.Logf("b got the crashed driver's slice after %v (lease %v)", waited, d)
		is.True(waited >= d) // never before expiry

		// a comes back and renews: it learns it lost s1.
		a.RenewAll(ctx)
		is.Equal(lost, []string{"s1"})
		is.NoErr(b.Release(ctx, []string{"s0", "s1"}))
	})

	t.Run("a renewing driver keeps its slices past the Lease duration", func(t *testing.T) {
		is := is.New(t)
		const d = time.Second
		a, b := newE2ELeases(t, client, "driver-a", d), newE2ELeases(t, client, "driver-b", d)
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { a.renewLoop(rctx) })
		defer func() { stop(); wg.Wait() }()
		is.NoErr(a.Claim(ctx, "pg-a", []string{"s4"}))
		// For three Lease durations b keeps asking and is refused.
		end := time.Now().Add(3 * d)
		tries := 0
		for time.Now().Before(end) {
			err := b.Claim(ctx, "pg-b", []string{"s4"})
			is.True(errors.Is(err, backend.ErrResourceExhausted))
			tries++
		}
		t.Logf("b refused %d times over %v", tries, 3*d)
		is.Equal(a.Held(), []string{"s4"})
		is.NoErr(a.Release(ctx, []string{"s4"}))
	})
}
