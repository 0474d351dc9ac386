package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

var errBoom = errors.New("boom")

// claimPath is one way a claimed reservation can end.
type claimPath struct {
	name             string
	claimErr         error        // the source fails claims
	reservedErr      error        // the runner fails Reserved
	cancelOnClaim    bool         // the caller gives up while its claim is in flight
	cancelOnReserved bool         // the caller gives up as the runner is told
	closeOnClaim     bool         // the cluster closes while a claim is in flight
	remove           bool         // the reservation is removed before Close
	wantCode         backend.Code // of ReserveSlices
	wantGrants       int          // claims granted by the source
	wantReserved     int          // reservations told to the runner
}

var claimPaths = []claimPath{
	{name: "removed", remove: true, wantCode: backend.OK, wantGrants: 1, wantReserved: 1},
	{name: "released by Close", wantCode: backend.OK, wantGrants: 1, wantReserved: 1},
	{name: "claim fails", claimErr: backend.Errorf(backend.FailedPrecondition, "lease", "forbidden"), wantCode: backend.FailedPrecondition},
	{name: "runner fails", reservedErr: backend.Errorf(backend.Unavailable, "pod", "%w", errBoom), wantCode: backend.Unavailable, wantGrants: 1},
	{name: "caller gives up after the claim", cancelOnClaim: true, wantCode: backend.Canceled, wantGrants: 1},
	{name: "caller gives up after Reserved", cancelOnReserved: true, wantCode: backend.Canceled, wantGrants: 1, wantReserved: 1},
	{name: "closed during the claim", closeOnClaim: true, wantCode: backend.FailedPrecondition, wantGrants: 1},
}

// runClaimPaths reserves req on a shared cluster of nodes and ends the
// reservation on each claim path: every granted claim is released exactly
// once, and the runner is told of the release of every reservation it was
// told of. check inspects each outcome (res is nil on error) and returns
// how many more claims and reservations it made.
func runClaimPaths(t *testing.T, nodes func() []cluster.Node, req *backend.SliceRequest,
	check func(is *is.I, tt claimPath, rt *cluster.Runtime, src *testSource, r *testRunner, res *backend.SliceReservation) (moreGrants, moreReserved int)) {
	for _, tt := range claimPaths {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, nodes())
			src.claimErr = tt.claimErr
			r := newTestRunner()
			r.reservedErr = tt.reservedErr
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelOnClaim {
				src.onClaim = func(cluster.Claim) { cancel() }
			}
			if tt.cancelOnReserved {
				r.onReserved = cancel
			}
			rt := start(t, src, r)
			closed := make(chan error, 1)
			if tt.closeOnClaim {
				src.waitCtx = true
				src.onClaim = func(cluster.Claim) { go func() { closed <- rt.Close() }() }
			}
			res, err := rt.ReserveSlices(ctx, req)
			if tt.closeOnClaim {
				is.NoErr(<-closed) // Close returned after the claim was released
				src.checkReleased(t, tt.wantGrants)
			}
			is.Equal(backend.CodeOf(err), tt.wantCode)
			if tt.reservedErr != nil {
				is.True(errors.Is(err, errBoom)) // the runner's error is kept
			}
			if err != nil {
				res = nil
			}
			moreGrants, moreReserved := check(is, tt, rt, src, r, res)
			is.NoErr(rt.Close())
			src.checkReleased(t, tt.wantGrants+moreGrants)
			r.checkReleased(t, tt.wantReserved+moreReserved)
		})
	}
}

// TestClaimReleasedOnEveryPath reserves one whole slice on every claim
// path; the runner gets each host's env.
func TestClaimReleasedOnEveryPath(t *testing.T) {
	runClaimPaths(t, func() []cluster.Node { return tpuHosts(2) }, request("r"),
		func(is *is.I, tt claimPath, rt *cluster.Runtime, _ *testSource, r *testRunner, res *backend.SliceReservation) (int, int) {
			if res == nil {
				return 0, 0
			}
			is.Equal(len(res.Slices), 1)
			r.mu.Lock()
			env := r.reserved[res.Group.String()]
			r.mu.Unlock()
			is.Equal(env[res.Slices[0].Hosts[0]][tpu.EnvWorkerID], "0") // the runner got each host's env
			if tt.remove {
				is.NoErr(rt.RemovePlacementGroup(context.Background(), res.Group))
			}
			return 0, 0
		})
}

// TestClaimHeldElsewhere: slices another driver holds are skipped for
// other intact slices, or waited for until the caller's deadline or until
// the other driver lets go; for whole slices and sub-slices alike.
func TestClaimHeldElsewhere(t *testing.T) {
	kinds := []struct {
		name       string
		hosts      func(n int) []cluster.Node
		req        *backend.SliceRequest
		otherHosts []string // the hosts granted from the other slice
		asked      string   // what the give-up error says was asked
	}{
		{"whole", tpuHosts, request("r"), []string{"s1-w0"}, "waiting for 1 × v6e 2x2"},
		{"sub-slice", tpuHosts4x4, subRequest("sub"), []string{"s1-w0", "s1-w2"}, "waiting for the sub-slice v6e 2x4 (4 chips per host) in v6e 4x4"},
	}
	for _, k := range kinds {
		t.Run(k.name+"/other slice", func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, k.hosts(2))
			src.setHeld("s0", true)
			r := newTestRunner()
			rt := start(t, src, r)
			res, err := rt.ReserveSlices(context.Background(), k.req)
			is.NoErr(err)
			is.Equal(sliceNames(res), []string{"s1"})
			is.Equal(res.Slices[0].Hosts, k.otherHosts)
			is.NoErr(rt.Close())
			src.checkReleased(t, 1)
			r.checkReleased(t, 1)
		})
		t.Run(k.name+"/deadline", func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, k.hosts(1))
			src.setHeld("s0", true)
			r := newTestRunner()
			rt := start(t, src, r)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := rt.ReserveSlices(ctx, k.req)
			is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)
			is.True(errors.Is(err, context.DeadlineExceeded))
			is.True(strings.Contains(err.Error(), k.asked)) // says what was asked
			st, err := rt.Slices(context.Background())
			is.NoErr(err)
			is.True(st[0].ReservedBy == 0)    // nothing is left reserved
			is.Equal(len(st[0].Subslices), 0) // whole or in part
			pending, err := rt.PendingSliceRequests(context.Background())
			is.NoErr(err)
			is.Equal(len(pending), 0) // nor queued
			is.NoErr(rt.Close())
			src.checkReleased(t, 0)
			r.checkReleased(t, 0)
		})
		t.Run(k.name+"/let go", func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, k.hosts(1))
			src.setHeld("s0", true)
			tried := make(chan struct{})
			var once sync.Once
			src.onClaim = func(cluster.Claim) { once.Do(func() { close(tried) }) }
			r := newTestRunner()
			rt := start(t, src, r)
			go func() {
				<-tried
				src.setHeld("s0", false) // the other driver lets go
			}()
			res, err := rt.ReserveSlices(context.Background(), k.req)
			is.NoErr(err)
			is.Equal(sliceNames(res), []string{"s0"})
			src.mu.Lock()
			attempts := src.attempts
			src.mu.Unlock()
			is.True(attempts >= 2) // refused, then retried
			is.NoErr(rt.Close())
			src.checkReleased(t, 1)
			r.checkReleased(t, 1)
		})
	}
}

// TestClaimsDoNotConflict: concurrent reservations of one driver never
// claim the same slice twice (the test source fails the test if they do),
// and each waits for the previous one's release.
func TestClaimsDoNotConflict(t *testing.T) {
	is := is.New(t)
	const n = 8
	src := newTestSource(t, tpuHosts(2))
	r := newTestRunner()
	rt := start(t, src, r)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			res, err := rt.ReserveSlices(context.Background(), request("r"))
			if err == nil {
				err = rt.RemovePlacementGroup(context.Background(), res.Group)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		is.NoErr(err)
	}
	is.NoErr(rt.Close())
	src.checkReleased(t, n)
	r.checkReleased(t, n)
}

// TestNodesAfterStart: nodes a source reports after Start join the node
// table and the slice index (a waiting reservation gets the new slice),
// a drained idle node is lost, and a killed node comes back restored.
func TestNodesAfterStart(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, nil)
	r := newTestRunner()
	rt := start(t, src, r)
	got := make(chan error, 1)
	go func() {
		res, err := rt.ReserveSlices(context.Background(), request("r"))
		if err == nil && len(res.Slices) != 1 {
			err = errors.New("want one slice")
		}
		got <- err
	}()
	// The reservation is Infeasible if it runs before the slice exists,
	// and granted if after.
	src.mu.Lock()
	src.nodes = append(tpuHosts(1), cluster.Node{Name: "cpu", Resources: backend.Resources{backend.CPU: 2, "custom": 1}})
	for _, n := range src.nodes {
		src.sink.NodeAdded(n)
	}
	src.mu.Unlock()
	err := <-got
	if backend.CodeOf(err) == backend.Infeasible {
		// It ran before the host was in: reserve again, now it exists.
		_, err = rt.ReserveSlices(context.Background(), request("r"))
	}
	is.NoErr(err)
	is.NoErr(src.Drain(context.Background(), "cpu"))
	st, err := rt.Snapshot(context.Background())
	is.NoErr(err)
	is.Equal(len(st.Nodes), 2)
	is.Equal(st.Nodes[1].Name, "cpu")
	is.True(!st.Nodes[1].Alive)                   // drained while idle: lost
	is.Equal(st.Nodes[1].Capacity["custom"], 1.0) // a resource name first seen after Start
	is.NoErr(rt.KillNode(context.Background(), "cpu"))
	is.NoErr(rt.RestartNode(context.Background(), "cpu"))
	st, err = rt.Snapshot(context.Background())
	is.NoErr(err)
	is.True(st.Nodes[1].Alive)
	is.NoErr(rt.Close())
	src.checkReleased(t, 1)
}

// hostDownRunner is a testRunner whose first Reserved loses a host of the
// claim (its node deleted while the workers start, as a node pool scaled
// away under the claim) and fails.
type hostDownRunner struct {
	*testRunner
	src  *testSource
	once sync.Once
}

func (r *hostDownRunner) Reserved(ctx context.Context, c cluster.Claim, env map[string]map[string]string) error {
	var lost string
	r.once.Do(func() {
		lost = c.Hosts[0][len(c.Hosts[0])-1]
		_ = r.src.Kill(ctx, lost)
	})
	if lost != "" {
		return backend.Errorf(backend.Unavailable, "start worker", "node %s was lost while its worker started", lost)
	}
	return r.testRunner.Reserved(ctx, c, env)
}

// A reservation whose claim failed because a host it picked went down
// meanwhile waits for other capacity within its context instead of
// failing: here it gets the other slice.
func TestClaimRetriedWhenAPickedHostGoesDown(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  *backend.SliceRequest
	}{
		{"whole slice", wholeRequest("whole")},
		{"sub-slice", subRequest("sub")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, tpuHosts4x4(2))
			r := &hostDownRunner{testRunner: newTestRunner(), src: src}
			rt := start(t, src, r)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := rt.ReserveSlices(ctx, tt.req)
			is.NoErr(err)
			is.Equal(res.Slices[0].Name, "s1") // s0 lost a host during the first claim
			is.NoErr(rt.RemovePlacementGroup(ctx, res.Group))
			is.NoErr(rt.Close())
			src.checkReleased(t, 2) // the failed claim was released too
			r.checkReleased(t, 1)
		})
	}
}
