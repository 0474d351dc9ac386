package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// noChipsRunner is a runner whose workers outside slice reservations
// hold no chips, as the Kubernetes backend's CPU pods; it is a
// ClaimRunner, so the runtime claims hosts for such work.
type noChipsRunner struct{ *testRunner }

func (noChipsRunner) ChipsOutsideReservations() bool { return false }

// noChipsPlainRunner is the same without ClaimRunner: the runtime cannot
// claim hosts and refuses such work.
type noChipsPlainRunner struct{}

func (noChipsPlainRunner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	return exec, nil
}
func (noChipsPlainRunner) NodeUp(ctx context.Context, n cluster.Node) error { return nil }
func (noChipsPlainRunner) NodeDown(name string)                             {}
func (noChipsPlainRunner) Close() error                                     { return nil }
func (noChipsPlainRunner) ChipsOutsideReservations() bool                   { return false }

// chipsExec answers "<node> <TPU_VISIBLE_CHIPS>"; a task named "block"
// first waits until release is closed.
type chipsExec struct {
	nodeExec
}

func (e chipsExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	v, err := e.nodeExec.RunTask(ctx, name, arg, info)
	return backend.Value{Data: append(v.Data, " "+info.Env[tpu.EnvVisibleChips]...)}, err
}

// A runner whose workers outside reservations hold no chips, without the
// seams to claim hosts, makes TPU work there Infeasible, saying to
// reserve a slice; the same work in a slice reservation's bundle runs.
func TestChipsOnlyInReservations(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, namedHosts(1))
	plain := struct {
		cluster.NodeSource
		cluster.Syncer
	}{src, src} // not a SliceClaimer
	rt, err := cluster.New(plain, noChipsPlainRunner{}, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(context.Background(), nodeExec{}))
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "outside a slice reservation")) // says why
	is.True(strings.Contains(err.Error(), "ray.NewSlicePlacementGroup"))  // and what to do
	_, err = rt.CreateActor(ctx, &backend.ActorSpec{Class: "c", Scheduling: backend.Scheduling{Resources: backend.Resources{backend.TPU: 4}, Placement: backend.Placement{Bundle: -1}}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	_, err = rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{{Resources: backend.Resources{backend.TPU: 2}}}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "bundle 0"))

	node, err := runOn(t, rt, backend.Resources{backend.CPU: 1}, backend.Placement{})
	is.NoErr(err) // work without chips runs anywhere
	is.True(node != "")

	r, err := rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, NumSlices: 1})
	is.NoErr(err)
	node, err = runOn(t, rt, backend.Resources{backend.TPU: 4}, backend.Placement{Group: r.Group, Bundle: 0})
	is.NoErr(err) // in a reservation's bundle, chips are the pods'
	is.Equal(node, "s0-w0")
	is.NoErr(rt.RemovePlacementGroup(ctx, r.Group))
}

// startHostClaims starts a runtime with host claims: src, runner (whose
// workers hold no chips outside reservations), opts and exec.
func startHostClaims(t *testing.T, src *testSource, runner *testRunner, opts cluster.Options, exec backend.Executor) *cluster.Runtime {
	t.Helper()
	rt, err := cluster.New(src, noChipsRunner{runner}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), exec); err != nil {
		t.Fatal(err)
	}
	return rt
}

// hostClaims are the host claims the source granted, in order.
func hostClaims(src *testSource) []cluster.Claim {
	src.mu.Lock()
	defer src.mu.Unlock()
	var out []cluster.Claim
	for _, c := range src.history {
		if strings.HasPrefix(c.ID, "chips-") {
			out = append(out, c)
		}
	}
	return out
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// With the seams, TPU work outside reservations runs on a host the
// driver claims for it first (a one-host sub-slice claim of its slice,
// and the runner told to start the host's worker with all its chips);
// work that fills a claimed host claims another; an idle host's claim
// ends after HostIdle, and nothing is claimed twice.
func TestHostClaimsForLooseChips(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, namedHosts(2))
	runner := newTestRunner()
	release := make(chan struct{})
	rt := startHostClaims(t, src, runner, cluster.Options{HostIdle: 50 * time.Millisecond}, chipsExec{nodeExec{release: release}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Four one-chip tasks: one host claimed, a chip each.
	var ids []backend.ObjectID
	for range 4 {
		id, err := submit(ctx, rt, "block", backend.Resources{backend.TPU: 1}, backend.Placement{})
		is.NoErr(err)
		ids = append(ids, id)
	}
	waitFor(t, "a host is claimed", func() bool { return len(hostClaims(src)) == 1 })
	c := hostClaims(src)[0]
	is.True(c.Subslice)                                                // shared with the driver's other sub-slice claims
	is.Equal(len(c.Hosts), 1)                                          // one host
	is.Equal(len(c.Hosts[0]), 1)                                       //
	is.Equal(c.Slices, []string{strings.Split(c.Hosts[0][0], "-")[0]}) // of its slice
	// A fifth does not fit the claimed host: another host is claimed.
	id5, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
	is.NoErr(err)
	v, err := rt.Get(ctx, id5)
	is.NoErr(err)
	fifth := strings.Fields(string(v.Data))
	is.Equal(len(hostClaims(src)), 2)
	is.True(fifth[0] != c.Hosts[0][0])
	is.Equal(fifth[1], "0") // chip 0 of the second host
	runner.mu.Lock()
	env := runner.reserved[c.ID]
	runner.mu.Unlock()
	_, told := env[c.Hosts[0][0]]
	is.True(told) // the runner was told to start the host's worker

	close(release)
	var chips []string
	for _, id := range ids {
		v, err := rt.Get(ctx, id)
		is.NoErr(err)
		f := strings.Fields(string(v.Data))
		is.Equal(f[0], c.Hosts[0][0]) // all four on the claimed host
		chips = append(chips, f[1])
	}
	slices.Sort(chips)
	is.Equal(chips, []string{"0", "1", "2", "3"}) // a chip each

	// Idle for HostIdle: both claims end, on the runner and the source.
	waitFor(t, "the idle hosts' claims end", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.granted) == 0
	})
	src.checkReleased(t, 2)
	runner.checkReleased(t, 2)

	// A whole-slice reservation is granted once the hosts are free again.
	r, err := rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, NumSlices: 2})
	is.NoErr(err)
	is.NoErr(rt.RemovePlacementGroup(ctx, r.Group))
	is.NoErr(rt.Close())
}

// A claimed host keeps slice reservations off its slice while work runs
// there; a slice another driver holds is not claimed until it is free;
// bundles asking for chips are placed on claimed hosts too.
func TestHostClaimsAndReservations(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, namedHosts(2))
	runner := newTestRunner()
	release := make(chan struct{})
	rt := startHostClaims(t, src, runner, cluster.Options{HostIdle: 20 * time.Millisecond, ClaimRetry: 20 * time.Millisecond}, chipsExec{nodeExec{release: release}})
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	src.setHeld("s1", true) // another driver holds s1
	blocked, err := submit(ctx, rt, "block", backend.Resources{backend.TPU: 2}, backend.Placement{})
	is.NoErr(err)
	waitFor(t, "a host is claimed", func() bool { return len(hostClaims(src)) == 1 })
	is.Equal(hostClaims(src)[0].Slices, []string{"s0"})
	// s0 is in use, s1 held elsewhere: a whole slice waits.
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = rt.ReserveSlices(short, &backend.SliceRequest{Shape: shape4x4, NumSlices: 1})
	stop()
	is.True(errors.Is(err, context.DeadlineExceeded))

	// Work naming s1 waits until the other driver lets it go.
	named, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1, "s1": 1}, backend.Placement{})
	is.NoErr(err)
	time.Sleep(60 * time.Millisecond)
	is.Equal(len(hostClaims(src)), 1)
	src.setHeld("s1", false)
	v, err := rt.Get(ctx, named)
	is.NoErr(err)
	is.True(strings.HasPrefix(string(v.Data), "s1-"))

	// A placement group's chip bundles go to a claimed host.
	pg, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.StrictPack, Bundles: []backend.Bundle{
		{Resources: backend.Resources{backend.TPU: 1}}, {Resources: backend.Resources{backend.TPU: 1}},
	}})
	is.NoErr(err)
	in, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{Group: pg, Bundle: 1})
	is.NoErr(err)
	v, err = rt.Get(ctx, in)
	is.NoErr(err)
	node := strings.Fields(string(v.Data))[0]
	claimedHost := func(node string) bool {
		for _, c := range hostClaims(src) {
			if c.Hosts[0][0] == node {
				return true
			}
		}
		return false
	}
	is.True(claimedHost(node))
	is.NoErr(rt.RemovePlacementGroup(ctx, pg))

	close(release)
	_, err = rt.Get(ctx, blocked)
	is.NoErr(err)
	waitFor(t, "every claim ends", func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.granted) == 0
	})
	r, err := rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, NumSlices: 2})
	is.NoErr(err) // both slices free again
	is.NoErr(rt.RemovePlacementGroup(ctx, r.Group))
}

// A host claim ends on every path: its node lost, the runtime closed
// with work running there, a claim in flight when the runtime closes, a
// runner that fails to start the host's worker (tried again later).
func TestHostClaimReleasedOnEveryPath(t *testing.T) {
	// holding starts a runtime whose one blocked one-chip task holds a
	// claimed host, and returns the claim.
	holding := func(t *testing.T) (*cluster.Runtime, *testSource, *testRunner, cluster.Claim) {
		src := newTestSource(t, namedHosts(1))
		runner := newTestRunner()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rt := startHostClaims(t, src, runner, cluster.Options{HostIdle: time.Hour}, chipsExec{nodeExec{release: release}})
		if _, err := submit(context.Background(), rt, "block", backend.Resources{backend.TPU: 1}, backend.Placement{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a host is claimed", func() bool { return len(runner.reservedIDs()) == 1 })
		return rt, src, runner, hostClaims(src)[0]
	}
	t.Run("NodeLost", func(t *testing.T) {
		is := is.New(t)
		rt, src, runner, c := holding(t)
		defer rt.Close()
		is.NoErr(src.Kill(context.Background(), c.Hosts[0][0]))
		waitFor(t, "the lost host's claim ends", func() bool {
			src.mu.Lock()
			defer src.mu.Unlock()
			return src.releases[c.ID] == 1
		})
		runner.mu.Lock()
		is.Equal(runner.released[c.ID], 1) // its pod stopped
		runner.mu.Unlock()
	})
	t.Run("Close", func(t *testing.T) {
		is := is.New(t)
		rt, src, runner, _ := holding(t)
		is.NoErr(rt.Close())
		src.checkReleased(t, 1)
		runner.checkReleased(t, 1)
	})
	t.Run("CloseWhileClaiming", func(t *testing.T) {
		is := is.New(t)
		src := newTestSource(t, namedHosts(1))
		src.waitCtx = true // granted, but the claim returns only when cancelled
		runner := newTestRunner()
		rt := startHostClaims(t, src, runner, cluster.Options{}, chipsExec{})
		_, err := submit(context.Background(), rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
		is.NoErr(err)
		waitFor(t, "a claim is in flight", func() bool { return len(hostClaims(src)) == 1 })
		is.NoErr(rt.Close())
		// The claim the source granted returned once Close cancelled it:
		// released, the runner never told.
		src.checkReleased(t, 1)
		is.Equal(len(runner.reservedIDs()), 0)
	})
	t.Run("NodeLostWhileClaiming", func(t *testing.T) {
		// The claim in flight is abandoned; the waiting work claims
		// another host at once instead of waiting on the abandoned claim.
		is := is.New(t)
		src := newTestSource(t, namedHosts(1))
		src.waitCtx = true // the claim returns only when cancelled
		runner := newTestRunner()
		rt := startHostClaims(t, src, runner, cluster.Options{ClaimRetry: time.Hour}, chipsExec{})
		defer rt.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
		is.NoErr(err)
		waitFor(t, "a claim is in flight", func() bool { return len(hostClaims(src)) == 1 })
		first := hostClaims(src)[0].Hosts[0][0]
		src.mu.Lock()
		src.waitCtx = false
		src.mu.Unlock()
		is.NoErr(src.Kill(ctx, first))
		v, err := rt.Get(ctx, id)
		is.NoErr(err) // ran on another host
		is.True(!strings.HasPrefix(string(v.Data), first+" "))
	})
	t.Run("RunnerFails", func(t *testing.T) {
		is := is.New(t)
		src := newTestSource(t, namedHosts(1))
		runner := newTestRunner()
		runner.reservedErr = backend.Errorf(backend.Unavailable, "start", "no chips on the node")
		rt := startHostClaims(t, src, runner, cluster.Options{ClaimRetry: 20 * time.Millisecond}, chipsExec{})
		defer rt.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
		is.NoErr(err)
		waitFor(t, "a claim is tried twice", func() bool { return len(hostClaims(src)) >= 2 })
		runner.mu.Lock()
		runner.reservedErr = nil
		runner.mu.Unlock()
		_, err = rt.Get(ctx, id)
		is.NoErr(err) // runs once the runner starts the worker
		src.mu.Lock()
		defer src.mu.Unlock()
		for _, c := range src.history[:len(src.history)-1] {
			is.Equal(src.releases[c.ID], 1) // each failed try was released
		}
	})
}

// reservedIDs lists the claims the runner was told of.
func (r *testRunner) reservedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.reserved {
		out = append(out, id)
	}
	return out
}

// BenchmarkLooseChipTasks runs one-chip tasks outside reservations, one
// after another, where workers hold chips anywhere (the simulator) and
// where the runtime first claims the host (host claims; the host stays
// claimed between tasks): once a host is claimed, placing work on it
// costs what it costs elsewhere.
//
//	go test -run '^$' -bench LooseChipTasks -count 3 ./backend/cluster/
func BenchmarkLooseChipTasks(b *testing.B) {
	for _, mode := range []string{"simulator", "host-claims"} {
		b.Run(mode, func(b *testing.B) {
			src := newTestSource(b, namedHosts(4))
			var runner cluster.Runner = newTestRunner()
			if mode == "host-claims" {
				runner = noChipsRunner{newTestRunner()}
			}
			rt, err := cluster.New(src, runner, cluster.Options{HostIdle: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			if err := rt.Start(context.Background(), chipsExec{}); err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			ctx := context.Background()
			for b.Loop() {
				id, err := submit(ctx, rt, "where", backend.Resources{backend.TPU: 1}, backend.Placement{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rt.Get(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
