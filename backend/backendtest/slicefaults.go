package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// gates2 names the gates of failOnWorker0.
type gates2 struct{ Block, Fail string }

// failOnWorker0 blocks on the Block gate on every TPU worker but 0, which
// waits for the Fail gate and then fails.
var failOnWorker0 = ray.NewTask("backendtest.failOnWorker0", func(ctx context.Context, g gates2) (string, error) {
	rc, _ := ray.Runtime(ctx)
	if rc.Env(tpu.EnvWorkerID) == "0" {
		if _, err := blockOn(ctx, g.Fail); err != nil {
			return "", err
		}
		return "", errors.New("worker 0 fails")
	}
	return blockOn(ctx, g.Block)
})

// testSliceFaults checks gang semantics: a lost host of a reserved slice
// fails all of the reservation's work at once, never a partial re-run.
func (s *suite) testSliceFaults(t *testing.T) {
	s.need(t, s.h.Capabilities.TPUSlices && s.h.Capabilities.FaultInjection && s.h.Capabilities.Concurrent,
		"TPUSlices, FaultInjection and Concurrent")
	one := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}
	two := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2}
	faults := func(t *testing.T, c *ray.Cluster) backend.FaultInjector {
		t.Helper()
		fi, ok := c.Backend().(backend.FaultInjector)
		if !ok {
			t.Fatalf("backend %T declares FaultInjection but does not implement backend.FaultInjector", c.Backend())
		}
		return fi
	}
	unavailableNaming := func(is *is.I, err error, host string) {
		is.Helper()
		is.Equal(ray.CodeOf(err), ray.Unavailable)                 // lost host gives Unavailable
		is.True(err != nil && strings.Contains(err.Error(), host)) // the error names the lost host
	}
	t.Run("HostLossFailsAllPinnedWorkAtOnce", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		name, g := newGate(4)
		defer g.release()
		var refs []ray.ObjectRef[string]
		for i := range spg.NumHosts() {
			// Retries left must not make a task wait for its dead host.
			refs = append(refs, block.Remote(ctx, c, name, ray.InBundle(spg.PlacementGroup(), i), ray.Resources{ray.CPU: 0}, ray.Retries(3)))
		}
		s.waitChan(t, g.arrivedCh, "every host's task to start")
		// An actor on another host of the slice, with restarts left.
		actor := counterClass.Remote(ctx, c, 0, ray.InBundle(spg.PlacementGroup(), 1), ray.MaxRestarts(5))
		is.NoErr(actor.Ready(ctx))
		lost := spg.Hosts()[2]
		is.NoErr(faults(t, c).KillNode(ctx, lost))
		_, err = counterAdd.Remote(ctx, actor, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied) // not restarted on a broken slice
		is.True(strings.Contains(err.Error(), lost))
		for _, r := range refs {
			_, err := r.Get(ctx)
			unavailableNaming(is, err, lost)
		}
		s.waitChan(t, g.cancelCh, "every host's task to be cancelled")

		// Later work on the broken reservation fails the same way.
		_, err = block.Remote(ctx, c, name, ray.InBundle(spg.PlacementGroup(), 0), ray.Resources{ray.CPU: 0}).Get(ctx)
		unavailableNaming(is, err, lost)
		unavailableNaming(is, spg.PlacementGroup().Ready(ctx), lost)

		// Releasing keeps the cause visible.
		is.NoErr(spg.Release(ctx))
		_, err = refs[0].Get(ctx)
		unavailableNaming(is, err, lost)
		_, err = block.Remote(ctx, c, name, ray.InBundle(spg.PlacementGroup(), 1), ray.Resources{ray.CPU: 0}).Get(ctx)
		unavailableNaming(is, err, lost)

		// The broken slice stays out of service until it is whole.
		_, err = ray.NewSlicePlacementGroup(timeout(t, ctx, 50*time.Millisecond), c, two)
		is.True(errors.Is(err, context.DeadlineExceeded))
		is.True(strings.Contains(err.Error(), "1 broken")) // the wait names the broken slice
		other, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		is.True(other.SliceNames()[0] != spg.SliceNames()[0]) // the intact slice, not the broken one
		is.NoErr(other.Release(ctx))
		is.NoErr(faults(t, c).RestartNode(ctx, lost))
		both, err := ray.NewSlicePlacementGroup(ctx, c, two)
		is.NoErr(err)
		is.NoErr(both.Release(ctx))
	})
	t.Run("RunOnSliceReturnsHostLoss", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, two)
		is.NoErr(err)
		defer spg.Release(ctx)
		name, g := newGate(8)
		defer g.release()
		done := make(chan error, 1)
		go func() {
			_, err := ray.RunOnSlice(ctx, spg, block, name)
			done <- err
		}()
		s.waitChan(t, g.arrivedCh, "every host's task to start")
		lost := spg.Hosts()[5]
		is.NoErr(faults(t, c).KillNode(ctx, lost))
		select {
		case err := <-done:
			unavailableNaming(is, err, lost)
		case <-time.After(patience):
			t.Fatalf("RunOnSlice did not return within %v of losing %s", patience, lost)
		}
		// Every host of both slices was stopped, not just the lost one.
		s.waitChan(t, g.cancelCh, "every host's task to be cancelled")
	})
	t.Run("RunOnSliceCancelsOtherHostsOnFailure", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		defer spg.Release(ctx)
		name, g := newGate(3) // workers 1-3 block
		defer g.release()
		failName, fail := newGate(1) // worker 0 fails once they do
		defer fail.release()
		done := make(chan error, 1)
		go func() {
			_, err := ray.RunOnSlice(ctx, spg, failOnWorker0, gates2{Block: name, Fail: failName})
			done <- err
		}()
		s.waitChan(t, g.arrivedCh, "workers 1-3 to block")
		fail.release()
		select {
		case err := <-done:
			is.Equal(ray.CodeOf(err), ray.TaskFailed)
			is.True(strings.Contains(err.Error(), "worker 0 fails"))
		case <-time.After(patience):
			t.Fatalf("RunOnSlice did not return within %v of a host's failure", patience)
		}
		// The other hosts' work is stopped, not left to hang.
		s.waitChan(t, g.cancelCh, "the other hosts' tasks to be cancelled")
	})
	t.Run("DispatchRetriesOnFreshReservation", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		name, g := newGate(4)
		defer g.release()
		type result struct {
			out []string
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := ray.Dispatch(ctx, c, one, block, name, ray.Retries(1))
			done <- result{out, err}
		}()
		s.waitChan(t, g.arrivedCh, "the first attempt's tasks to start")
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		var first backend.SliceState
		for _, st := range states {
			if st.ReservedBy != 0 {
				first = st
			}
		}
		is.True(first.Name != "")
		is.NoErr(faults(t, c).KillNode(ctx, first.Hosts[1].Node))
		s.waitChan(t, g.cancelCh, "the first attempt's tasks to be cancelled")
		g.release() // the re-run's tasks return at once
		var r result
		select {
		case r = <-done:
		case <-time.After(patience):
			t.Fatalf("Dispatch did not return within %v", patience)
		}
		is.NoErr(r.err)
		is.Equal(r.out, []string{"opened", "opened", "opened", "opened"})
		is.Equal(g.count(), 8) // every host ran again, not only the lost one
		states, err = ray.TPUSlices(ctx, c)
		is.NoErr(err)
		for _, st := range states {
			is.Equal(st.ReservedBy, backend.PlacementGroupID(0)) // Dispatch released both reservations
		}
	})
	t.Run("DispatchWithoutRetriesFails", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		name, g := newGate(4)
		defer g.release()
		done := make(chan error, 1)
		go func() {
			_, err := ray.Dispatch(ctx, c, one, block, name)
			done <- err
		}()
		s.waitChan(t, g.arrivedCh, "the tasks to start")
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		lost := ""
		for _, st := range states {
			if st.ReservedBy != 0 {
				lost = st.Hosts[3].Node
			}
		}
		is.NoErr(faults(t, c).KillNode(ctx, lost))
		select {
		case err := <-done:
			unavailableNaming(is, err, lost)
		case <-time.After(patience):
			t.Fatalf("Dispatch did not return within %v", patience)
		}
		is.Equal(g.count(), 4) // no host ran twice
	})
}
