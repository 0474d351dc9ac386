//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

// k8sRow is a row of the e2e train dataset, made in the driver by a Go
// closure that never reaches the pods.
type k8sRow struct {
	ID   int
	Text string
}

type k8sShardCfg struct {
	Epochs, StepRows int
	// In attempt 0, rank FailRank fails after FailAfter rows of epoch 1.
	FailRank, FailAfter int
}

// k8sShardState is what each rank checkpoints: the row IDs it has seen by
// epoch, and the pod it read them in.
type k8sShardState struct {
	Seen map[int][]int   `json:"seen"`
	Pods map[string]bool `json:"pods"`
}

// k8sShards reads its shard of "train" in its worker pod, a step (an
// AllReduce and a report whose checkpoint holds every row this rank has
// seen) every StepRows rows and at each epoch's end; it checks each row's
// text, made in the driver.
var k8sShards = train.NewLoop("k8stest.shards", func(ctx context.Context, w *train.Worker, cfg k8sShardCfg) error {
	st := k8sShardState{Seen: map[int][]int{}, Pods: map[string]bool{}}
	if b, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
	}
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		return errors.New("not in a pod: POD_NAME is empty")
	}
	st.Pods[pod] = true
	step := func() error {
		xs := []float64{1}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		b, _ := json.Marshal(st)
		return w.Report(ctx, train.Metrics{"workers": xs[0]}, b)
	}
	epoch, _, err := w.ShardPosition("train")
	if err != nil {
		return err
	}
	for ; epoch < cfg.Epochs; epoch++ {
		_, n, _ := w.ShardPosition("train")
		for row, err := range train.DatasetShard[k8sRow](ctx, w, "train") {
			if err != nil {
				return err
			}
			if row.Text != fmt.Sprintf("row %d of the driver", row.ID) {
				return fmt.Errorf("row %d arrived as %+v", row.ID, row)
			}
			st.Seen[epoch] = append(st.Seen[epoch], row.ID)
			n++
			if w.Attempt() == 0 && w.Rank() == cfg.FailRank && epoch == 1 && n == int64(cfg.FailAfter) {
				return errors.New("injected failure in the pod")
			}
			if n%int64(cfg.StepRows) == 0 {
				if err := step(); err != nil {
					return err
				}
			}
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
})

// TestE2ETrainDataset: train on 2 × v6e 4x4 (8 worker pods on a real
// control plane) with a dataset whose rows are made in the driver by a
// Go closure (data.Map over data.Range): each pod reads its own shard
// over the rendezvous, 2 epochs of 2003 rows with equal shares (250 a
// rank, the last 3 rows dropped), rank r getting rows r, r+8, ... In
// attempt 0 rank 5 fails mid-epoch 1; the run restarts on fresh pods
// from the latest checkpoint, each shard resuming after the rows its
// rank had consumed, and over both attempts every row of every epoch is
// seen exactly once. The slices and pods are released afterwards.
func TestE2ETrainDataset(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "4x4", []string{"slice-a", "slice-b"}, nil)
	bucket := storage.NewMem()
	defer bucket.Close()
	const total, epochs, world = 2003, 2, 8
	rows := data.Map(data.Range(total), func(_ context.Context, i int) (k8sRow, error) {
		return k8sRow{ID: i, Text: fmt.Sprintf("row %d of the driver", i)}, nil
	})
	tr, err := train.New(c, k8sShards, k8sShardCfg{Epochs: epochs, StepRows: 25, FailRank: 5, FailAfter: 110},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
		train.RunConfig{Name: "e2e-data", Progress: train.ProgressOff, Bucket: bucket, MaxFailures: 1, KeepCheckpoints: -1,
			Datasets: train.Datasets{"train": train.Data(rows)}})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.Equal(res.Metrics["workers"], float64(world))
	is.Equal(len(res.Failures), 1)
	f := res.Failures[0]
	is.True(strings.Contains(f.Cause, "injected failure in the pod"))
	// 11 steps an epoch (10 of 25 rows, one at the end): rank 5's 100th
	// row of epoch 1 is iteration 11+4.
	is.True(f.ResumeFrom > 11 && f.ResumeFrom <= 11+4)
	for _, ck := range res.Checkpoints {
		if ck.Iteration == f.ResumeFrom {
			t.Logf("resumed from checkpoint %d: %+v", ck.Iteration, *ck.Datasets["train"])
			is.Equal(ck.Datasets["train"].Rows[5], int64(25*(f.ResumeFrom-11))) // mid-epoch 1
		}
	}
	pods := map[string]bool{}
	for e := range epochs {
		seen := map[int]int{}
		for r := range world {
			b, err := res.Checkpoint.Load(ctx, r)
			is.NoErr(err)
			var st k8sShardState
			is.NoErr(json.Unmarshal(b, &st))
			for p := range st.Pods {
				pods[p] = true
			}
			var want []int
			for k := range total / world {
				want = append(want, k*world+r)
			}
			if !slices.Equal(st.Seen[e], want) {
				t.Fatalf("epoch %d rank %d saw %d rows, want %d (rows r, r+8, ...)", e, r, len(st.Seen[e]), len(want))
			}
			for _, id := range st.Seen[e] {
				seen[id]++
			}
		}
		is.Equal(len(seen), total/world*world) // every row but the remainder
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("epoch %d: row %d seen %d times", e, id, n)
			}
		}
	}
	t.Logf("rows read in pods %v", slices.Sorted(func(yield func(string) bool) {
		for p := range pods {
			if !yield(p) {
				return
			}
		}
	}))
	is.True(len(pods) >= world) // every rank read in a pod of its own

	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		is.Equal(st.ReservedBy, ray.PlacementGroupID(0)) // released
	}
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// TestE2ETrainDatasetAllToAll: a data.ApplyPool map whose actors each
// hold a v6e 2x4 slice in worker pods, followed in the driver by Sort
// (with a memory budget small enough to spill) and GroupBy: checked row
// by row against what the rows must be, and every row computed in a pod
// of a reserved slice.
func TestE2ETrainDatasetAllToAll(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, nil)
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)
	pool := data.Pool[*k8sScaler, int]{
		Cluster: c, Class: k8sScalerClass, Arg: 3, Min: 2, Max: 2,
		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4},
	}
	const n = 3000
	scaledRows := data.ApplyPool(data.Range(n), pool, k8sScale, data.BatchSize(50))

	var stats data.Stats
	sorted, err := data.Take(ctx, data.SortBy(scaledRows, func(s scaled) int { return s.V }, data.Descending(), data.MemoryBudget(data.MinMemoryBudget)), 2*n,
		data.CollectStats(&stats))
	is.NoErr(err)
	is.Equal(len(sorted), n)
	for i, s := range sorted {
		if s.V != 3*(n-1-i) || (s.Slice != "slice-a" && s.Slice != "slice-b") {
			t.Fatalf("sorted row %d is %+v, want V %d from a pod of slice-a or slice-b", i, s, 3*(n-1-i))
		}
	}
	var spilled int64
	for _, o := range stats.Operators {
		if o.Memory != nil {
			spilled += o.Memory.SpilledRows
		}
	}
	t.Logf("sort spilled %d rows", spilled)
	is.True(spilled > 0) // the budget made it spill

	groups, err := data.Take(ctx, data.GroupBy(scaledRows, func(s scaled) int { return s.V % 7 }, data.SumOf(func(s scaled) int { return s.V })), 100)
	is.NoErr(err)
	is.Equal(len(groups), 7)
	for k, g := range groups {
		want := 0
		for i := range n {
			if 3*i%7 == k {
				want += 3 * i
			}
		}
		is.Equal(g.Key, k)
		is.Equal(g.Value, want) // group by group
	}

	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		is.Equal(st.ReservedBy, ray.PlacementGroupID(0)) // released
	}
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
