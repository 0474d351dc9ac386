package cluster_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

func subRequest(name string) *backend.SliceRequest {
	return &backend.SliceRequest{Shape: shape4x4, Subslice: "2x4", Name: name}
}

func wholeRequest(name string) *backend.SliceRequest {
	return &backend.SliceRequest{Shape: shape4x4, NumSlices: 1, Name: name}
}

// TestSubsliceClaimReleasedOnEveryPath reserves a sub-slice of a shared
// cluster and ends the reservation on each path: the claim names the
// parent slice and the sub-slice's hosts in worker order, the runner gets
// the sub-slice's env, every granted claim is released exactly once, the
// runner is told of the release of every reservation it was told of, and
// the whole slice can be claimed afterwards.
func TestSubsliceClaimReleasedOnEveryPath(t *testing.T) {
	runClaimPaths(t, func() []cluster.Node { return tpuHosts4x4(1) }, subRequest("sub"),
		func(is *is.I, tt claimPath, rt *cluster.Runtime, src *testSource, r *testRunner, res *backend.SliceReservation) (moreGrants, moreReserved int) {
			src.mu.Lock()
			history := append([]cluster.Claim(nil), src.history...)
			src.mu.Unlock()
			if tt.wantGrants > 0 {
				is.Equal(history[0].Slices, []string{"s0"})                // the parent slice
				is.Equal(history[0].Hosts, [][]string{{"s0-w0", "s0-w2"}}) // sub-slice 0's hosts, in its worker order
			}
			if res == nil {
				return 0, 0
			}
			is.Equal(len(res.Slices), 1)
			is.Equal(res.Slices[0].SubsliceIndex, 0)
			is.Equal(history[0].ID, res.Group.String()) // claimed as its group
			r.mu.Lock()
			env := r.reserved[res.Group.String()]
			r.mu.Unlock()
			is.Equal(len(env), 2)                                                // one env per host of the sub-slice
			is.Equal(env["s0-w2"][tpu.EnvWorkerID], "1")                         // its worker ID in the sub-slice
			is.Equal(env["s0-w2"][tpu.EnvWorkerHostnames], "s0-w0,s0-w2")        // the sub-slice's hosts
			is.Equal(env["s0-w2"][tpu.EnvName], res.Slices[0].SubsliceID)        // a slice of its own
			is.Equal(env["s0-w0"][tpu.EnvWorkerID], res.Env[0][tpu.EnvWorkerID]) // the bundles' env
			if !tt.remove {
				return 0, 0
			}
			is.NoErr(rt.RemovePlacementGroup(context.Background(), res.Group))
			// The whole slice is claimed only once the sub-slice's claim has
			// ended (the source fails the test on a host claimed twice).
			whole, err := rt.ReserveSlices(context.Background(), wholeRequest("whole"))
			is.NoErr(err)
			is.Equal(sliceNames(whole), []string{"s0"})
			return 1, 1
		})
}

// TestSubslicesOfOneSliceBothClaimed: while the claim of one sub-slice is
// in flight, its hosts are not picked again (a second request gets the
// other sub-slice) and the slice is not picked whole; both sub-slices are
// claimed, and a whole-slice request gets the slice only after both
// claims have ended.
func TestSubslicesOfOneSliceBothClaimed(t *testing.T) {
	is := is.New(t)
	src := newTestSource(t, tpuHosts4x4(1))
	r := newTestRunner()
	rt := start(t, src, r)
	type result struct {
		res *backend.SliceReservation
		err error
	}
	second := make(chan result, 1)
	var claims atomic.Int32
	idleDuring := true
	src.onClaim = func(cluster.Claim) {
		if claims.Add(1) != 1 {
			return
		}
		// The first claim is in flight: reserve the second sub-slice now
		// (its claim calls onClaim again), and look at the slice.
		res, err := rt.ReserveSlices(context.Background(), subRequest("second"))
		second <- result{res, err}
		st, err := rt.Slices(context.Background())
		if err == nil {
			idleDuring = st[0].Idle
		}
	}
	first, err := rt.ReserveSlices(context.Background(), subRequest("first"))
	is.NoErr(err)
	got := <-second
	is.NoErr(got.err)
	is.True(!idleDuring) // a sub-slice being claimed keeps the slice from being idle
	is.Equal(first.Slices[0].SubsliceIndex, 0)
	is.Equal(got.res.Slices[0].SubsliceIndex, 1) // not the sub-slice whose claim was in flight
	is.Equal(got.res.Slices[0].Hosts, []string{"s0-w1", "s0-w3"})
	st, err := rt.Slices(context.Background())
	is.NoErr(err)
	is.Equal(len(st[0].Subslices), 2)

	// The whole slice waits for both.
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = rt.ReserveSlices(short, wholeRequest("whole"))
	is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)
	whole := make(chan result, 1)
	go func() {
		res, err := rt.ReserveSlices(context.Background(), wholeRequest("whole"))
		whole <- result{res, err}
	}()
	is.NoErr(rt.RemovePlacementGroup(context.Background(), first.Group))
	is.NoErr(rt.RemovePlacementGroup(context.Background(), got.res.Group))
	w := <-whole
	is.NoErr(w.err)
	is.Equal(sliceNames(w.res), []string{"s0"})
	is.NoErr(rt.Close())
	src.checkReleased(t, 3)
	r.checkReleased(t, 3)
}

// TestSubsliceAndWholeClaimsDoNotConflict: concurrent sub-slice and
// whole-slice reservations of one driver never claim a host twice (the
// test source fails the test if they do), and each waits for the
// previous holder's release.
func TestSubsliceAndWholeClaimsDoNotConflict(t *testing.T) {
	is := is.New(t)
	const n = 12
	src := newTestSource(t, tpuHosts4x4(1))
	r := newTestRunner()
	rt := start(t, src, r)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			req := subRequest("sub")
			if i%3 == 0 {
				req = wholeRequest("whole")
			}
			res, err := rt.ReserveSlices(context.Background(), req)
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
