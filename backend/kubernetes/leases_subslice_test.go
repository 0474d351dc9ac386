package kubernetes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/goray-dev/goray/backend/cluster"
)

// TestLeasesSubsliceClaims: a driver's sub-slice claims share the slice's
// Lease; another driver can hold neither a sub-slice nor the whole slice
// (so no host is held twice) until the last of them is released.
func TestLeasesSubsliceClaims(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a, b := newTestLeases(t, client, "driver-a", clk), newTestLeases(t, client, "driver-b", clk)
	ctx := t.Context()

	is.NoErr(a.ClaimSubslice(ctx, "pg-1", "s1"))
	l, err := getLease(t, client, "s1")
	is.NoErr(err)
	is.Equal(*l.Spec.HolderIdentity, "driver-a")
	is.Equal(l.Annotations[annotationClaim], subsliceClaim)
	is.NoErr(a.ClaimSubslice(ctx, "pg-2", "s1")) // a's second sub-slice joins
	is.Equal(a.SubsliceClaims("s1"), []string{"pg-1", "pg-2"})

	var held *cluster.HeldError
	is.True(errors.As(b.ClaimSubslice(ctx, "pg-9", "s1"), &held)) // b's sub-slice: refused
	is.Equal(held.Holder, "driver-a")
	is.True(errors.As(b.Claim(ctx, "pg-9", []string{"s1"}), &held)) // b's whole slice: refused
	is.True(errors.As(a.Claim(ctx, "pg-3", []string{"s1"}), &held)) // a's own whole-slice claim too

	is.NoErr(a.ReleaseSubslice(ctx, "pg-1", "s1"))
	_, err = getLease(t, client, "s1")
	is.NoErr(err) // pg-2 still holds it
	is.True(errors.As(b.ClaimSubslice(ctx, "pg-9", "s1"), &held))
	is.NoErr(a.ReleaseSubslice(ctx, "pg-2", "s1"))
	_, err = getLease(t, client, "s1")
	is.True(apierrors.IsNotFound(err)) // the last release deletes it
	is.NoErr(b.ClaimSubslice(ctx, "pg-9", "s1"))

	// A whole slice held by b keeps a's sub-slices off it.
	is.NoErr(b.Claim(ctx, "pg-10", []string{"s2"}))
	is.True(errors.As(a.ClaimSubslice(ctx, "pg-4", "s2"), &held))
	is.Equal(a.SubsliceClaims("s2"), []string(nil))
}

// TestSourceSubsliceClaimsAreExclusive: two drivers' sources on one
// cluster race for sub-slices and whole slices of one v6e 4x4 (through
// cluster.SliceClaimer, as the runtime calls it); a host is never held by
// both.
func TestSourceSubsliceClaimsAreExclusive(t *testing.T) {
	nodes := tpuNodes("a", "tpu-v6e-slice", "4x4", 4, 4)
	client := checkVersions(newFakeClient(objects(nodes)...))
	var srcs []*Source
	for _, id := range []string{"driver-a", "driver-b"} {
		cfg := testConfig()
		cfg.Identity = id
		leases, err := NewLeases(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		leases.backoff.Duration = time.Millisecond
		src, err := NewSource(client, cfg, ClusterID("c-"+id), leases)
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
		srcs = append(srcs, src)
	}
	hosts := []string{"a-0", "a-1", "a-2", "a-3"}
	sub := func(id string, hs ...string) cluster.Claim {
		return cluster.Claim{ID: id, Slices: []string{"a"}, Hosts: [][]string{hs}}
	}
	whole := cluster.Claim{ID: "pg-w", Slices: []string{"a"}, Hosts: [][]string{hosts}}
	tests := []struct {
		name string
		a, b cluster.Claim
	}{
		{"same sub-slice", sub("pg-1", "a-0", "a-1"), sub("pg-2", "a-0", "a-1")},
		{"other sub-slice of the slice", sub("pg-1", "a-0", "a-1"), sub("pg-2", "a-2", "a-3")}, // coarse: per slice
		{"whole after sub", sub("pg-1", "a-2", "a-3"), whole},
		{"sub after whole", whole, sub("pg-2", "a-0", "a-1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			ctx := t.Context()
			is.NoErr(srcs[0].ClaimSlices(ctx, tt.a))
			err := srcs[1].ClaimSlices(ctx, tt.b)
			var held *cluster.HeldError
			is.True(errors.As(err, &held)) // b may not hold what a holds
			is.Equal(held.Holder, "driver-a")
			is.NoErr(srcs[0].ReleaseSlices(ctx, tt.a))
			is.NoErr(srcs[1].ClaimSlices(ctx, tt.b)) // free again
			is.NoErr(srcs[1].ReleaseSlices(ctx, tt.b))
			_, err = getLease(t, client, "a")
			is.True(apierrors.IsNotFound(err)) // nothing left
		})
	}
}

// TestLeasesSubsliceClaimWaitsForRelease: a sub-slice claim of a slice
// whose last sub-slice claim is being released waits for the release (the
// runtime claims a sub-slice while another of its slice is released), so
// the release cannot delete the Lease the new claim took: the claim ends
// holding a Lease that exists.
func TestLeasesSubsliceClaimWaitsForRelease(t *testing.T) {
	is := is.New(t)
	fc := checkVersions(newFakeClient())
	// The release's first look at the Lease waits, outside the fake
	// clientset's lock, until the test lets it go.
	inRelease, letGo := make(chan struct{}), make(chan struct{})
	var gets atomic.Int32
	hook := func() {
		if gets.Add(1) == 1 {
			close(inRelease)
			<-letGo
		}
	}
	cfg := testConfig()
	cfg.Identity = "driver-a"
	a, err := NewLeases(hookClient{fc, hook}, cfg)
	is.NoErr(err)
	a.backoff.Duration = time.Millisecond
	ctx := t.Context()
	is.NoErr(a.ClaimSubslice(ctx, "pg-1", "s1")) // a create: no get

	released := make(chan error, 1)
	go func() { released <- a.ReleaseSubslice(ctx, "pg-1", "s1") }()
	<-inRelease
	claimed := make(chan error, 1)
	go func() { claimed <- a.ClaimSubslice(ctx, "pg-2", "s1") }()
	select {
	case err := <-claimed:
		t.Fatalf("the claim returned (%v) while the slice's last sub-slice claim was being released", err)
	case <-time.After(100 * time.Millisecond): // a negative check: the claim must not finish at all
	}
	close(letGo)
	is.NoErr(<-released)
	is.NoErr(<-claimed)
	l, err := getLease(t, fc, "s1")
	is.NoErr(err) // the new claim's Lease is there
	is.Equal(*l.Spec.HolderIdentity, "driver-a")
	is.Equal(a.Held(), []string{"s1"}) // and renewed
	is.Equal(a.SubsliceClaims("s1"), []string{"pg-2"})
	is.NoErr(a.ReleaseSubslice(ctx, "pg-2", "s1"))
	_, err = getLease(t, fc, "s1")
	is.True(apierrors.IsNotFound(err))
}

// hookClient is a fake clientset whose Lease Gets call onGet first,
// outside the fake's lock.
type hookClient struct {
	*fake.Clientset
	onGet func()
}

func (c hookClient) CoordinationV1() coordinationv1.CoordinationV1Interface {
	return hookCoord{c.Clientset.CoordinationV1(), c.onGet}
}

type hookCoord struct {
	coordinationv1.CoordinationV1Interface
	onGet func()
}

func (c hookCoord) Leases(ns string) coordinationv1.LeaseInterface {
	return hookLeases{c.CoordinationV1Interface.Leases(ns), c.onGet}
}

type hookLeases struct {
	coordinationv1.LeaseInterface
	onGet func()
}

func (l hookLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordv1.Lease, error) {
	l.onGet()
	return l.LeaseInterface.Get(ctx, name, opts)
}
