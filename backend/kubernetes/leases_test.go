package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// clock is a settable time source shared by the claimers of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// checkVersions makes the fake clientset's Leases behave like the
// apiserver's: every write bumps the resourceVersion, and an update
// carrying another version than the stored one conflicts.
func checkVersions(client *fake.Clientset) *fake.Clientset {
	var mu sync.Mutex
	gvr := leaseGR.WithVersion("v1")
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "create":
			l := a.(k8stesting.CreateAction).GetObject().(*coordv1.Lease).DeepCopy()
			l.ResourceVersion = "1"
			if err := client.Tracker().Create(gvr, l, l.Namespace); err != nil {
				return true, nil, err
			}
			return true, l, nil
		case "update":
			l := a.(k8stesting.UpdateAction).GetObject().(*coordv1.Lease).DeepCopy()
			cur, err := client.Tracker().Get(gvr, l.Namespace, l.Name)
			if err != nil {
				return true, nil, err
			}
			if rv := cur.(*coordv1.Lease).ResourceVersion; rv != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(leaseGR, l.Name, fmt.Errorf("resourceVersion %s, stored %s", l.ResourceVersion, rv))
			}
			n, _ := strconv.Atoi(l.ResourceVersion)
			l.ResourceVersion = strconv.Itoa(n + 1)
			if err := client.Tracker().Update(gvr, l, l.Namespace); err != nil {
				return true, nil, err
			}
			return true, l, nil
		}
		return false, nil, nil
	})
	return client
}

func newTestLeases(t *testing.T, client *fake.Clientset, identity string, clk *clock) *Leases {
	t.Helper()
	cfg := testConfig()
	cfg.Identity = identity
	cfg.Lease.Duration = 10 * time.Second
	l, err := NewLeases(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.now = clk.now
	l.backoff.Duration = time.Millisecond
	return l
}

var leaseGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func getLease(t *testing.T, client *fake.Clientset, slice string) (*coordv1.Lease, error) {
	t.Helper()
	return client.CoordinationV1().Leases("default").Get(context.Background(), LeaseName(slice), metav1.GetOptions{})
}

func TestLeasesClaimIsExclusive(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a, b := newTestLeases(t, client, "driver-a", clk), newTestLeases(t, client, "driver-b", clk)
	ctx := t.Context()

	is.NoErr(a.Claim(ctx, "pg-1", []string{"s1", "s2"}))
	l, err := getLease(t, client, "s1")
	is.NoErr(err)
	is.Equal(*l.Spec.HolderIdentity, "driver-a")
	is.Equal(*l.Spec.LeaseDurationSeconds, int32(10))
	is.Equal(l.Annotations[AnnotationSlice], "s1")

	// b wants s3 and s2: s2 is a's, so b holds nothing, and the error
	// names the slice and its holder.
	err = b.Claim(ctx, "pg-9", []string{"s3", "s2", "s1"})
	var held *cluster.HeldError
	is.True(errors.As(err, &held))
	is.Equal(held.Slices, []string{"s2", "s1"})
	is.Equal(held.Holder, "driver-a")
	is.Equal(backend.CodeOf(err), backend.ResourceExhausted)
	is.True(errors.Is(err, backend.ErrResourceExhausted))
	_, err = getLease(t, client, "s3")
	is.True(apierrors.IsNotFound(err)) // rolled back
	is.Equal(b.Held(), []string(nil))

	// a claiming a slice it holds for another reservation is refused too.
	err = a.Claim(ctx, "pg-2", []string{"s1"})
	is.True(errors.As(err, &held))

	// Release deletes a's Leases; then b gets them.
	is.NoErr(a.Release(ctx, []string{"s1", "s2"}))
	_, err = getLease(t, client, "s1")
	is.True(apierrors.IsNotFound(err))
	is.NoErr(b.Claim(ctx, "pg-9", []string{"s3", "s2", "s1"}))
	is.Equal(b.Held(), []string{"s1", "s2", "s3"})
}

func TestLeasesTakenOverOnlyAfterExpiry(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a, b := newTestLeases(t, client, "driver-a", clk), newTestLeases(t, client, "driver-b", clk)
	var lost []string
	a.onLost = func(slice string, cause error) { lost = append(lost, slice+": "+cause.Error()) }
	ctx := t.Context()
	is.NoErr(a.Claim(ctx, "pg-1", []string{"s1"}))

	clk.advance(9 * time.Second) // not expired yet
	is.True(errors.Is(b.Claim(ctx, "pg-2", []string{"s1"}), backend.ErrResourceExhausted))
	a.RenewAll(ctx) // a renews: the Lease lives 10s from now
	clk.advance(9 * time.Second)
	is.True(errors.Is(b.Claim(ctx, "pg-2", []string{"s1"}), backend.ErrResourceExhausted))

	clk.advance(2 * time.Second) // a stopped renewing: expired
	is.NoErr(b.Claim(ctx, "pg-2", []string{"s1"}))
	l, err := getLease(t, client, "s1")
	is.NoErr(err)
	is.Equal(*l.Spec.HolderIdentity, "driver-b")
	is.Equal(*l.Spec.LeaseTransitions, int32(1))

	// a's next renewal finds the Lease taken over and reports it lost;
	// its Release leaves b's Lease alone.
	a.RenewAll(ctx)
	is.Equal(len(lost), 1)
	is.True(strings.Contains(lost[0], "taken over by driver-b"))
	is.Equal(a.Held(), []string(nil))
	is.NoErr(a.Release(ctx, []string{"s1"}))
	l, err = getLease(t, client, "s1")
	is.NoErr(err)
	is.Equal(*l.Spec.HolderIdentity, "driver-b")
}

func TestLeasesRetryConflictsAndAPIErrors(t *testing.T) {
	type reactor struct {
		verb string
		fail int // calls to fail
		err  error
	}
	conflict := apierrors.NewConflict(leaseGR, "x", errors.New("the object has been modified"))
	tests := []struct {
		name     string
		reactors []reactor
		wantCode backend.Code
		wantErr  string
	}{
		{name: "create conflicts then succeeds", reactors: []reactor{{"create", 2, apierrors.NewAlreadyExists(leaseGR, "x")}}},
		{name: "get fails transiently", reactors: []reactor{{"get", 3, apierrors.NewInternalError(errors.New("etcd leader changed"))}}},
		{name: "throttled", reactors: []reactor{{"create", 1, apierrors.NewTooManyRequests("slow down", 0)}}},
		{name: "update conflicts then succeeds", reactors: []reactor{{"update", 2, conflict}}},
		{name: "forbidden is not retried", reactors: []reactor{{"update", 100, apierrors.NewForbidden(leaseGR, "x", errors.New("RBAC"))}},
			wantCode: backend.FailedPrecondition, wantErr: "forbidden"},
		{name: "unavailable for good", reactors: []reactor{{"get", 100, apierrors.NewServiceUnavailable("down")}},
			wantCode: backend.Unavailable, wantErr: `slice "s2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			clk := &clock{t: time.Unix(1e9, 0)}
			// An expired Lease of s2 held by a crashed driver makes the
			// claim of s2 an update.
			old := metav1.NewMicroTime(clk.now().Add(-time.Hour))
			secs := int32(10)
			client := checkVersions(newFakeClient(&coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: LeaseName("s2"), Namespace: "default"},
				Spec:       coordv1.LeaseSpec{HolderIdentity: new("crashed"), RenewTime: &old, LeaseDurationSeconds: &secs},
			}))
			var mu sync.Mutex
			for _, r := range tt.reactors {
				calls := 0
				client.PrependReactor(r.verb, "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
					mu.Lock()
					defer mu.Unlock()
					// Fail only the calls about s2, after s1 was taken.
					if !strings.Contains(actionName(a), "s2") || calls >= r.fail {
						return false, nil, nil
					}
					calls++
					return true, nil, r.err
				})
			}
			l := newTestLeases(t, client, "driver-a", clk)
			err := l.Claim(t.Context(), "pg", []string{"s1", "s2"})
			if tt.wantErr == "" {
				is.NoErr(err)
				is.Equal(l.Held(), []string{"s1", "s2"})
				return
			}
			is.Equal(backend.CodeOf(err), tt.wantCode)
			is.True(strings.Contains(err.Error(), tt.wantErr))
			_, gerr := getLease(t, client, "s1")
			is.True(apierrors.IsNotFound(gerr)) // s1 rolled back
			is.Equal(l.Held(), []string(nil))
		})
	}
}

// actionName returns the object name an action is about.
func actionName(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.GetAction:
		return a.GetName()
	case k8stesting.DeleteAction:
		return a.GetName()
	case interface{ GetObject() runtime.Object }: // create, update
		if m, ok := a.GetObject().(metav1.Object); ok {
			return m.GetName()
		}
	}
	return ""
}

func TestLeasesLoseRaceForExpiredLease(t *testing.T) {
	is := is.New(t)
	clk := &clock{t: time.Unix(1e9, 0)}
	old := metav1.NewMicroTime(clk.now().Add(-time.Hour))
	secs := int32(10)
	client := checkVersions(newFakeClient(&coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName("s1"), Namespace: "default", ResourceVersion: "1"},
		Spec:       coordv1.LeaseSpec{HolderIdentity: new("crashed"), RenewTime: &old, LeaseDurationSeconds: &secs},
	}))
	// driver-c updates the expired Lease first: a's update, carrying the
	// old resourceVersion, conflicts; a reads again and sees c's live
	// claim.
	once := sync.Once{}
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		raced := false
		once.Do(func() {
			raced = true
			now := metav1.NewMicroTime(clk.now())
			l, _ := client.Tracker().Get(leaseGR.WithVersion("v1"), "default", LeaseName("s1"))
			lease := l.(*coordv1.Lease).DeepCopy()
			lease.Spec.HolderIdentity, lease.Spec.RenewTime = new("driver-c"), &now
			_ = client.Tracker().Update(leaseGR.WithVersion("v1"), lease, "default")
		})
		if raced {
			return true, nil, apierrors.NewConflict(leaseGR, LeaseName("s1"), errors.New("modified"))
		}
		return false, nil, nil
	})
	a := newTestLeases(t, client, "driver-a", clk)
	err := a.Claim(t.Context(), "pg", []string{"s1"})
	var held *cluster.HeldError
	is.True(errors.As(err, &held))
	is.Equal(held.Holder, "driver-c")
}

func TestLeasesReleaseAfterCancel(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	is.NoErr(a.Release(ctx, []string{"s1"})) // runs to its end anyway
	_, err := getLease(t, client, "s1")
	is.True(apierrors.IsNotFound(err))
}

func TestLeasesRenewalFindsDeletedLease(t *testing.T) {
	is := is.New(t)
	client := checkVersions(newFakeClient())
	clk := &clock{t: time.Unix(1e9, 0)}
	a := newTestLeases(t, client, "driver-a", clk)
	var lost []string
	a.onLost = func(slice string, cause error) { lost = append(lost, cause.Error()) }
	is.NoErr(a.Claim(t.Context(), "pg", []string{"s1"}))
	is.NoErr(client.CoordinationV1().Leases("default").Delete(t.Context(), LeaseName("s1"), metav1.DeleteOptions{}))
	a.RenewAll(t.Context())
	is.Equal(len(lost), 1)
	is.True(strings.Contains(lost[0], "was deleted"))
}
