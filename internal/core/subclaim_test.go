package core_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/core"
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
	errBoom := errors.New("boom")
	tests := []struct {
		name             string
		claimErr         error        // the source fails claims
		reservedErr      error        // the runner fails Reserved
		cancelOnClaim    bool         // the caller gives up while its claim is in flight
		cancelOnReserved bool         // the caller gives up as the runner is told
		closeOnClaim     bool         // the cluster closes while a claim is in flight
		remove           bool         // the reservation is removed before Close
		wantCode         backend.Code // of ReserveSlices
		wantGrants       int          // sub-slice claims granted by the source
		wantReserved     int          // reservations told to the runner
	}{
		{name: "removed", remove: true, wantCode: backend.OK, wantGrants: 1, wantReserved: 1},
		{name: "released by Close", wantCode: backend.OK, wantGrants: 1, wantReserved: 1},
		{name: "claim fails", claimErr: backend.Errorf(backend.FailedPrecondition, "lease", "forbidden"), wantCode: backend.FailedPrecondition},
		{name: "runner fails", reservedErr: backend.Errorf(backend.Unavailable, "pod", "%w", errBoom), wantCode: backend.Unavailable, wantGrants: 1},
		{name: "caller gives up after the claim", cancelOnClaim: true, wantCode: backend.Canceled, wantGrants: 1},
		{name: "caller gives up after Reserved", cancelOnReserved: true, wantCode: backend.Canceled, wantGrants: 1, wantReserved: 1},
		{name: "closed during the claim", closeOnClaim: true, wantCode: backend.FailedPrecondition, wantGrants: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, tpuHosts4x4(1))
			src.claimErr = tt.claimErr
			r := newTestRunner()
			r.reservedErr = tt.reservedErr
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelOnClaim {
				src.onClaim = func(core.Claim) { cancel() }
			}
			if tt.cancelOnReserved {
				r.onReserved = cancel
			}
			rt := start(t, src, r)
			closed := make(chan error, 1)
			if tt.closeOnClaim {
				src.waitCtx = true
				src.onClaim = func(core.Claim) { go func() { closed <- rt.Close() }() }
			}
			res, err := rt.ReserveSlices(ctx, subRequest("sub"))
			if tt.closeOnClaim {
				is.NoErr(<-closed) // Close returned after the claim was released
				src.checkReleased(t, tt.wantGrants)
			}
			is.Equal(backend.CodeOf(err), tt.wantCode)
			if tt.reservedErr != nil {
				is.True(errors.Is(err, errBoom)) // the runner's error is kept
			}
			src.mu.Lock()
			history := append([]core.Claim(nil), src.history...)
			src.mu.Unlock()
			if tt.wantGrants > 0 {
				is.Equal(history[0].Slices, []string{"s0"})                // the parent slice
				is.Equal(history[0].Hosts, [][]string{{"s0-w0", "s0-w2"}}) // sub-slice 0's hosts, in its worker order
			}
			if err == nil {
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
				if tt.remove {
					is.NoErr(rt.RemovePlacementGroup(context.Background(), res.Group))
					// The whole slice is claimed only once the sub-slice's
					// claim has ended (the source fails the test on a host
					// claimed twice).
					whole, err := rt.ReserveSlices(context.Background(), wholeRequest("whole"))
					is.NoErr(err)
					is.Equal(sliceNames(whole), []string{"s0"})
					tt.wantGrants++
					tt.wantReserved++
				}
			}
			is.NoErr(rt.Close())
			src.checkReleased(t, tt.wantGrants)
			r.checkReleased(t, tt.wantReserved)
		})
	}
}

// TestSubsliceClaimHeldElsewhere: a sub-slice of a slice another driver
// holds is taken from another slice, or waited for until the caller's
// deadline or until the other driver lets go.
func TestSubsliceClaimHeldElsewhere(t *testing.T) {
	t.Run("other slice", func(t *testing.T) {
		is := is.New(t)
		src := newTestSource(t, tpuHosts4x4(2))
		src.setHeld("s0", true)
		r := newTestRunner()
		rt := start(t, src, r)
		res, err := rt.ReserveSlices(context.Background(), subRequest("sub"))
		is.NoErr(err)
		is.Equal(sliceNames(res), []string{"s1"})
		is.Equal(res.Slices[0].Hosts, []string{"s1-w0", "s1-w2"})
		is.NoErr(rt.Close())
		src.checkReleased(t, 1)
		r.checkReleased(t, 1)
	})
	t.Run("deadline", func(t *testing.T) {
		is := is.New(t)
		src := newTestSource(t, tpuHosts4x4(1))
		src.setHeld("s0", true)
		r := newTestRunner()
		rt := start(t, src, r)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := rt.ReserveSlices(ctx, subRequest("sub"))
		is.Equal(backend.CodeOf(err), backend.DeadlineExceeded)
		is.True(errors.Is(err, context.DeadlineExceeded))
		st, err := rt.Slices(context.Background())
		is.NoErr(err)
		is.Equal(len(st[0].Subslices), 0) // nothing is left reserved
		n, err := rt.PendingSliceRequests(context.Background())
		is.NoErr(err)
		is.Equal(len(n), 0) // nor queued
		is.NoErr(rt.Close())
		src.checkReleased(t, 0)
		r.checkReleased(t, 0)
	})
	t.Run("let go", func(t *testing.T) {
		is := is.New(t)
		src := newTestSource(t, tpuHosts4x4(1))
		src.setHeld("s0", true)
		tried := make(chan struct{})
		var once sync.Once
		src.onClaim = func(core.Claim) { once.Do(func() { close(tried) }) }
		r := newTestRunner()
		rt := start(t, src, r)
		go func() {
			<-tried
			src.setHeld("s0", false) // the other driver lets go
		}()
		res, err := rt.ReserveSlices(context.Background(), subRequest("sub"))
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
	src.onClaim = func(core.Claim) {
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
