package train_test

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// meanOfRanks averages the workers' ranks with an AllReduce.
var meanOfRanks = train.NewLoop("train_test.example.mean", func(ctx context.Context, w *train.Worker, scale float64) error {
	xs := []float64{float64(w.Rank()) * scale}
	if err := train.AllReduce(ctx, w, xs, train.Mean); err != nil {
		return err
	}
	return w.Report(ctx, train.Metrics{"mean": xs[0], "workers": float64(w.WorldSize())}, nil)
})

// Training on two v6e 4x4 slices: 8 workers, one per host, derived from the
// topology.
func Example() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}}, nil)
	if err != nil {
		panic(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	tr, err := train.New(c, meanOfRanks, 10.0,
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
		train.RunConfig{Name: "mean", Progress: train.ProgressOff})
	if err != nil {
		panic(err)
	}
	res, err := tr.Fit(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("workers:", res.Metrics["workers"])
	fmt.Println("mean:", res.Metrics["mean"])

	// A worker count the topology contradicts is refused.
	_, err = train.New(c, meanOfRanks, 1.0, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumWorkers: 16}, train.RunConfig{})
	fmt.Println(err)
	// Output:
	// workers: 8
	// mean: 35
	// train: ScalingConfig: NumWorkers is 16, but 1 × v6e 4x4 (4 hosts of 4 chips each) means 4 workers, one per host; leave NumWorkers 0 to derive it
}
