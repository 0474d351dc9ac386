package cluster_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// logRecords is a slog handler that hands every record to a channel, for
// tests to wait on.
type logRecords chan slog.Record

func (logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h logRecords) Handle(_ context.Context, r slog.Record) error {
	h <- r.Clone()
	return nil
}
func (h logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logRecords) WithGroup(string) slog.Handler      { return h }

// waitWarning is one "work waits" warning, its attributes by key.
type waitWarning struct {
	waiting, reason string
	waited          time.Duration
}

// nextWaitWarning returns the next warning about waiting work whose
// "waiting" attribute contains what, skipping other records.
func nextWaitWarning(t *testing.T, recs logRecords, what string) waitWarning {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-recs:
			if r.Message != "cluster: work waits to start" || r.Level != slog.LevelWarn {
				continue
			}
			var w waitWarning
			r.Attrs(func(a slog.Attr) bool {
				switch a.Key {
				case "waiting":
					w.waiting = a.Value.String()
				case "reason":
					w.reason = a.Value.String()
				case "for":
					w.waited = a.Value.Duration()
				}
				return true
			})
			if strings.Contains(w.waiting, what) {
				return w
			}
		case <-timeout:
			t.Fatalf("no warning about %s waiting in 30s", what)
		}
	}
}

// startLogged starts a runtime on nodes whose logs go to the returned
// channel, warning about work that waits longer than threshold.
func startLogged(t *testing.T, nodes []cluster.Node, exec backend.Executor, threshold time.Duration) (*cluster.Runtime, logRecords) {
	t.Helper()
	recs := make(logRecords, 1024)
	rt, err := cluster.New(newTestSource(t, nodes), newTestRunner(), cluster.Options{Logger: slog.New(recs), WaitWarning: threshold})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), exec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.Close()
		// Nothing is logged once Close has returned: the watcher is gone.
		for len(recs) > 0 {
			<-recs
		}
		select {
		case r := <-recs:
			t.Errorf("logged after Close: %s", r.Message)
		default:
		}
	})
	return rt, recs
}

// A slice reservation that waits is logged once past the threshold, with
// the words of the timeout error, then again only at twice the age.
func TestWaitWarningSliceReservation(t *testing.T) {
	is := is.New(t)
	const threshold = 50 * time.Millisecond
	rt, recs := startLogged(t, tpuHosts(1), nopExec{}, threshold)
	ctx := context.Background()
	first, err := rt.ReserveSlices(ctx, request("first"))
	is.NoErr(err)
	defer rt.RemovePlacementGroup(ctx, first.Group)

	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := rt.ReserveSlices(wctx, request("second"))
		errc <- err
	}()
	w1 := nextWaitWarning(t, recs, `slice reservation "second"`)
	is.Equal(w1.waiting, `slice reservation "second" of 1 × v6e 2x2`)
	is.True(w1.waited >= threshold) // not before the threshold
	const state = "of the cluster's 1 slices of that shape 0 free, 1 busy, 0 broken"
	is.Equal(w1.reason, state+`; reserved by "first"`)
	w2 := nextWaitWarning(t, recs, `slice reservation "second"`)
	is.True(w2.waited >= 2*w1.waited-time.Millisecond) // backoff: the next one at twice the age (logged rounded to 1ms)

	cancel()
	err = <-errc
	is.True(errors.Is(err, context.Canceled))
	is.True(strings.Contains(err.Error(), state)) // the error says what the warning said
}

// A task queued for resources that every node's running work holds is
// logged with its demand and how the nodes stand; a placement group that
// cannot be placed is logged with the bundle that fits nowhere now.
func TestWaitWarningTaskAndGroup(t *testing.T) {
	is := is.New(t)
	const threshold = 50 * time.Millisecond
	exec := nodeExec{release: make(chan struct{})}
	nodes := []cluster.Node{{Name: "cpu0", Resources: backend.Resources{backend.CPU: 2}}}
	rt, recs := startLogged(t, nodes, exec, threshold)
	ctx := context.Background()
	busy, err := submit(ctx, rt, "block", backend.Resources{backend.CPU: 2}, backend.Placement{})
	is.NoErr(err)
	queued, err := submit(ctx, rt, "where", backend.Resources{backend.CPU: 1}, backend.Placement{})
	is.NoErr(err)
	_, err = submit(ctx, rt, "where", backend.Resources{backend.CPU: 1}, backend.Placement{})
	is.NoErr(err)
	pg, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Name: "gang", Strategy: backend.Pack,
		Bundles: []backend.Bundle{{Resources: backend.Resources{backend.CPU: 2}}}})
	is.NoErr(err)

	w := nextWaitWarning(t, recs, `task "where"`)
	is.Equal(w.waiting, `task "where" and 1 more with the same resources`)
	is.True(w.waited >= threshold)
	is.Equal(w.reason, "wants {CPU: 1}: none of the 1 live nodes that can hold it has it free now: they run 1 tasks and actors, and the most any of them has free is {}")
	g := nextWaitWarning(t, recs, `placement group "gang"`)
	is.Equal(g.waiting, `placement group "gang" (PACK) of 1 bundle`)
	is.Equal(g.reason, "bundle 0 wants {CPU: 2}: none of the 1 live nodes that can hold it has it free now: they run 1 tasks and actors, and the most any of them has free is {}")

	is.NoErr(rt.RemovePlacementGroup(ctx, pg)) // else it takes the node first
	close(exec.release)
	for _, id := range []backend.ObjectID{busy, queued} {
		_, err := rt.Get(ctx, id)
		is.NoErr(err)
	}
}

// Without a logger, or with WaitWarning negative, nothing watches the
// queues (goleak, in TestMain, finds no goroutine left either way).
func TestWaitWarningOff(t *testing.T) {
	is := is.New(t)
	recs := make(logRecords, 16)
	rt, err := cluster.New(newTestSource(t, tpuHosts(1)), newTestRunner(), cluster.Options{Logger: slog.New(recs), WaitWarning: -1})
	is.NoErr(err)
	is.NoErr(rt.Start(context.Background(), nopExec{}))
	ctx := context.Background()
	first, err := rt.ReserveSlices(ctx, request("first"))
	is.NoErr(err)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = rt.ReserveSlices(wctx, request("second"))
	is.True(errors.Is(err, context.DeadlineExceeded))
	is.NoErr(rt.RemovePlacementGroup(ctx, first.Group))
	is.NoErr(rt.Close())
	for len(recs) > 0 {
		r := <-recs
		is.True(r.Message != "cluster: work waits to start") // no warning when off
	}
}
