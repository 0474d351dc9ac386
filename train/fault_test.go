package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

type countCfg struct{ Iters, Len int }

// counting adds (rank+1) to every element each iteration through an
// AllReduce, checkpointing the vector at every iteration from rank 0: after
// Iters iterations every element is Iters*n(n+1)/2, however often the run
// restarted from a checkpoint.
var counting = train.NewLoop("train_test.counting", func(ctx context.Context, w *train.Worker, cfg countCfg) error {
	state := make([]float64, cfg.Len)
	resumed := 0.0
	if ck := w.Checkpoint(); ck != nil {
		resumed = float64(ck.Iteration)
	}
	if data, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if data != nil {
		if err := json.Unmarshal(data, &state); err != nil {
			return err
		}
	}
	for it := w.Iteration(); it < cfg.Iters; it++ {
		g := make([]float64, cfg.Len)
		for i := range g {
			g[i] = float64(w.Rank() + 1)
		}
		if err := train.AllReduce(ctx, w, g, train.Sum); err != nil {
			return err
		}
		for i := range state {
			state[i] += g[i]
		}
		var ck []byte
		if w.Rank() == 0 {
			ck, _ = json.Marshal(state)
		}
		if err := w.Report(ctx, train.Metrics{"value": state[0], "attempt": float64(w.Attempt()), "resumed_from": resumed}, ck); err != nil {
			return err
		}
	}
	return nil
})

// TestHostLoss kills a host (or preempts the slice) of the running
// attempt at iteration 5: the run releases the slice, reserves the other
// one, resumes from checkpoint 5 and reaches the same answer.
func TestHostLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		procs   bool
		preempt bool
	}{
		{"node killed", false, false},
		{"slice preempted", false, true},
		{"node killed, worker processes", true, false},
		{"slice preempted, worker processes", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			ctx := context.Background()
			b, c := newCluster(t, "4x4", 2, tc.procs)
			bucket := storage.NewMem()
			defer bucket.Close()
			var killed string
			var injectErr error
			inject := func(r train.Report) {
				if r.Attempt != 0 || r.Iteration != 5 {
					return
				}
				killed = r.Slices[0]
				if tc.preempt {
					injectErr = b.PreemptSlice(ctx, killed)
					return
				}
				injectErr = b.KillNode(ctx, hostOf(t, c, killed, 1))
			}
			const iters = 12
			tr, err := train.New(c, counting, countCfg{Iters: iters, Len: 8},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Progress: train.ProgressOff, MaxFailures: 2, KeepCheckpoints: 2, OnReport: inject, Bucket: bucket})
			is.NoErr(err)
			res, err := tr.Fit(ctx)
			is.NoErr(err)
			is.NoErr(injectErr)
			is.Equal(res.Metrics["value"], float64(iters*10)) // 1+2+3+4 per iteration
			is.Equal(res.Metrics["attempt"], 1.0)
			is.Equal(res.Attempts, 2)
			is.Equal(len(res.Failures), 1)
			f := res.Failures[0]
			is.Equal(f.Slice, killed)
			is.Equal(ray.CodeOf(f.Err), ray.Unavailable) // the host died
			is.True(f.ResumeFrom >= 4)                   // every rank had reported iteration 4 before rank 0 reported 5
			is.Equal(res.Checkpoint.Iteration, iters)
			is.Equal(len(res.Checkpoints), 2) // KeepCheckpoints
			data, err := res.Checkpoint.Load(ctx, 0)
			is.NoErr(err)
			var state []float64
			is.NoErr(json.Unmarshal(data, &state))
			is.Equal(state[7], float64(iters*10))
			assertReleased(t, c)
		})
	}
}

func hostOf(t testing.TB, c *ray.Cluster, slice string, worker int) string {
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Name == slice {
			return s.Hosts[worker].Node
		}
	}
	t.Fatalf("no slice %s", slice)
	return ""
}

func assertReleased(t testing.TB, c *ray.Cluster) {
	t.Helper()
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.ReservedBy != 0 {
			t.Errorf("slice %s is still reserved by %s", s.Name, s.ReservedName)
		}
	}
}

// observed records, per rank, the error each worker's collectives
// returned after another worker failed (in-process runs only).
var observed sync.Map

var failing = train.NewLoop("train_test.failing", func(ctx context.Context, w *train.Worker, cfg collCfg) error {
	xs := make([]float32, cfg.Len)
	if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
		observed.Store(cfg.Results+"/"+string(rune('0'+w.Rank())), err)
		return err
	}
	if w.Rank() == cfg.FailAt {
		return errors.New("injected failure")
	}
	// Every other rank blocks in a collective the failed rank never
	// joins; it must fail at once, naming the rank.
	var err error
	switch cfg.Op {
	case "AllReduce":
		err = train.AllReduce(ctx, w, xs, train.Sum)
	case "Broadcast":
		err = train.Broadcast(ctx, w, xs, cfg.FailAt)
	case "AllGather":
		_, err = train.AllGather(ctx, w, xs)
	case "Barrier":
		err = w.Barrier(ctx)
	}
	observed.Store(cfg.Results+"/"+string(rune('0'+w.Rank())), err)
	return err
})

// TestWorkerFailureAbortsCollectives: one worker's loop fails; every other
// worker's pending collective fails with a WorkerFailedError naming it,
// and the run fails (MaxFailures 0) naming it too.
func TestWorkerFailureAbortsCollectives(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failAt int
		op     string
		procs  bool
	}{
		{"AllReduce, rank 2 of 8 fails", 2, "AllReduce", false},
		{"Broadcast from the failed rank 0", 0, "Broadcast", false},
		{"AllGather, rank 7 of 8 fails", 7, "AllGather", false},
		{"Barrier, rank 5 of 8 fails", 5, "Barrier", false},
		{"AllReduce, rank 1 of 8 fails, worker processes", 1, "AllReduce", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 2, tc.procs)
			tr, err := train.New(c, failing, collCfg{Len: 1000, FailAt: tc.failAt, Results: tc.name, Op: tc.op},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
				train.RunConfig{Progress: train.ProgressOff})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.True(err != nil)
			t.Log(err)
			is.True(strings.Contains(err.Error(), "injected failure"))
			is.Equal(len(res.Failures), 1)
			is.Equal(res.Failures[0].Rank, tc.failAt)
			is.True(strings.Contains(res.Failures[0].Cause, "injected failure"))
			if tc.procs {
				return // the workers' errors stayed in their processes
			}
			for r := range 8 {
				if r == tc.failAt {
					continue
				}
				v, ok := observed.Load(tc.name + "/" + string(rune('0'+r)))
				is.True(ok) // every other rank returned from its collective
				var wf *train.WorkerFailedError
				is.True(errors.As(v.(error), &wf)) // a WorkerFailedError
				t.Log(v)
				is.Equal(wf.Rank, tc.failAt) // naming the failed rank
				is.True(errors.Is(v.(error), train.ErrWorkerFailed))
			}
		})
	}
}

// TestWaitForFreshSlice: the only slice loses a host. The restart waits
// for a fresh slice up to ReserveTimeout: it succeeds when the host comes
// back meanwhile, and fails with the failure history when none comes.
func TestWaitForFreshSlice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{
		{"the host comes back", true},
		{"no slice comes", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			ctx := context.Background()
			b, c := newCluster(t, "4x4", 1, false)
			var host string
			timeout := 100 * time.Millisecond
			if tc.restart {
				timeout = time.Minute
			}
			// The failure's log line comes after the slice was released
			// and just before the new reservation: bring the host back
			// concurrently with it (before or while it waits).
			var restarted sync.WaitGroup
			defer restarted.Wait()
			onFailure := hook{msg: "train: attempt failed", fn: func() {
				if tc.restart {
					restarted.Go(func() { b.RestartNode(ctx, host) }) //nolint:errcheck // the run's success checks it
				}
			}}
			tr, err := train.New(c, counting, countCfg{Iters: 20, Len: 2},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", ReserveTimeout: timeout},
				train.RunConfig{Progress: train.ProgressLog, ProgressLogger: slog.New(onFailure), MaxFailures: 3, OnReport: func(r train.Report) {
					if r.Attempt == 0 && r.Iteration == 3 {
						host = hostOf(t, c, r.Slices[0], 2)
						b.KillNode(ctx, host) //nolint:errcheck // checked by the failure below
					}
				}})
			is.NoErr(err)
			res, err := tr.Fit(ctx)
			is.Equal(len(res.Failures), 1)
			is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
			if tc.restart {
				is.NoErr(err)
				is.Equal(res.Metrics["value"], 200.0)
				is.Equal(res.Attempts, 2)
			} else {
				is.True(errors.Is(err, context.DeadlineExceeded)) // no fresh slice came
				is.True(res.Checkpoint.Iteration >= 2)            // what was saved is kept (every rank had reported 2 when rank 0 reported 3)
			}
			assertReleased(t, c)
		})
	}
}

// hook is a slog handler that calls fn on the message msg.
type hook struct {
	msg string
	fn  func()
}

func (h hook) Enabled(context.Context, slog.Level) bool { return true }
func (h hook) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.fn()
	}
	return nil
}
func (h hook) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h hook) WithGroup(string) slog.Handler      { return h }

// TestCancel: cancelling Fit's context stops every worker and releases
// the slices.
func TestCancel(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in process", true: "worker processes"}[procs], func(t *testing.T) {
			is := is.New(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, c := newCluster(t, "4x4", 2, procs)
			tr, err := train.New(c, counting, countCfg{Iters: 1 << 30, Len: 2},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
				train.RunConfig{Progress: train.ProgressOff, MaxFailures: -1, OnReport: func(r train.Report) {
					if r.Iteration == 10 {
						cancel()
					}
				}})
			is.NoErr(err)
			_, err = tr.Fit(ctx)
			is.Equal(err, context.Canceled)
			assertReleased(t, c)
		})
	}
}
