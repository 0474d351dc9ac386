package train_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

type collCfg struct {
	Len     int
	FailAt  int // rank that fails (returns an error) before its second AllReduce; -1: none
	Op      string
	Results string
}

// collectives checks every collective's result against the closed form
// and reports "ok" as metric 1 per check.
var collectives = train.NewLoop("train_test.collectives", func(ctx context.Context, w *train.Worker, cfg collCfg) error {
	n, r := w.WorldSize(), w.Rank()
	xs := make([]float32, cfg.Len)
	for i := range xs {
		xs[i] = float32(r + i)
	}
	if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
		return err
	}
	for i, v := range xs {
		if want := float32(n*i + n*(n-1)/2); v != want {
			return fmt.Errorf("rank %d: AllReduce Sum[%d] = %v, want %v", r, i, v, want)
		}
	}
	if r == cfg.FailAt {
		return errors.New("injected failure")
	}
	ys := []int64{int64(r), int64(-r)}
	if err := train.AllReduce(ctx, w, ys, train.Max); err != nil {
		return err
	}
	if ys[0] != int64(n-1) || ys[1] != 0 {
		return fmt.Errorf("rank %d: AllReduce Max = %v", r, ys)
	}
	ms := []float64{float64(r)}
	if err := train.AllReduce(ctx, w, ms, train.Mean); err != nil {
		return err
	}
	if ms[0] != float64(n-1)/2 {
		return fmt.Errorf("rank %d: AllReduce Mean = %v", r, ms)
	}
	bs := make([]float64, cfg.Len)
	if r == n-1 {
		for i := range bs {
			bs[i] = float64(i) * 0.5
		}
	}
	if err := train.Broadcast(ctx, w, bs, n-1); err != nil {
		return err
	}
	for i, v := range bs {
		if v != float64(i)*0.5 {
			return fmt.Errorf("rank %d: Broadcast[%d] = %v", r, i, v)
		}
	}
	mine := slices.Repeat([]int32{int32(r)}, r+1)
	all, err := train.AllGather(ctx, w, mine)
	if err != nil {
		return err
	}
	for k, got := range all {
		if !slices.Equal(got, slices.Repeat([]int32{int32(k)}, k+1)) {
			return fmt.Errorf("rank %d: AllGather[%d] = %v", r, k, got)
		}
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	return w.Report(ctx, train.Metrics{"ok": 1, "rank": float64(r)}, nil)
})

func TestCollectives(t *testing.T) {
	for _, tc := range []struct {
		name   string
		topo   string
		slices int
		procs  bool
		length int
	}{
		{"one host", "2x2", 1, false, 10},
		{"4 hosts", "4x4", 1, false, 1000},
		{"2 slices, fewer elements than ranks", "4x4", 2, false, 3},
		{"16 hosts, big", "8x8", 1, false, 300_000},
		{"4 hosts in worker processes", "4x4", 1, true, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, tc.topo, tc.slices, tc.procs)
			tr, err := train.New(c, collectives, collCfg{Len: tc.length, FailAt: -1},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: tc.topo, NumSlices: tc.slices},
				train.RunConfig{Progress: train.ProgressOff})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.NoErr(err)
			is.Equal(res.Metrics["ok"], 1.0)
			is.Equal(res.Metrics["rank"], 0.0) // rank 0's metrics are the run's
			is.Equal(res.Iteration, 1)
			is.Equal(len(res.Failures), 0)
		})
	}
}
