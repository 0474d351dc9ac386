package kubernetes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/goray-dev/goray/internal/core"
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

	var held *core.HeldError
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
// core.SliceClaimer, as the runtime calls it); a host is never held by
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
	sub := func(id string, hs ...string) core.Claim {
		return core.Claim{ID: id, Slices: []string{"a"}, Hosts: [][]string{hs}}
	}
	whole := core.Claim{ID: "pg-w", Slices: []string{"a"}, Hosts: [][]string{hosts}}
	tests := []struct {
		name string
		a, b core.Claim
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
			var held *core.HeldError
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
