package train_test

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// countRows reads each epoch of its shard of "train" and reports, from
// rank 0, how many rows every rank got (an AllGather) and their sum.
var countRows = train.NewLoop("train_test.example.countrows", func(ctx context.Context, w *train.Worker, epochs int) error {
	epoch, _, err := w.ShardPosition("train") // 0, or where a resumed run left off
	if err != nil {
		return err
	}
	for ; epoch < epochs; epoch++ {
		var count, sum float64
		for row, err := range train.DatasetShard[int](ctx, w, "train") {
			if err != nil {
				return err
			}
			count++
			sum += float64(row)
		}
		all, err := train.AllGather(ctx, w, []float64{count, sum})
		if err != nil {
			return err
		}
		m := train.Metrics{"epoch": float64(epoch)}
		for r, x := range all {
			m[fmt.Sprintf("rank%d", r)] = x[0]
			m["sum"] += x[1]
		}
		if err := w.Report(ctx, m, nil); err != nil {
			return err
		}
	}
	return nil
})

// Four workers (one v6e 4x4) each read their shard of a dataset of 10
// rows for two epochs: equal shares by default, every row with
// KeepRemainder.
func ExampleDatasetShard() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4"}}}, nil)
	if err != nil {
		panic(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	for _, ds := range []train.Dataset{
		train.Data(data.Range(10)),
		train.Data(data.Range(10), train.KeepRemainder()),
	} {
		tr, err := train.New(c, countRows, 2,
			train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
			train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": ds},
				OnReport: func(r train.Report) {
					m := r.Metrics
					fmt.Printf("epoch %v: rows per rank %v %v %v %v, sum %v\n", m["epoch"], m["rank0"], m["rank1"], m["rank2"], m["rank3"], m["sum"])
				}})
		if err != nil {
			panic(err)
		}
		if _, err := tr.Fit(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// epoch 0: rows per rank 2 2 2 2, sum 28
	// epoch 1: rows per rank 2 2 2 2, sum 28
	// epoch 0: rows per rank 3 3 2 2, sum 45
	// epoch 1: rows per rank 3 3 2 2, sum 45
}
