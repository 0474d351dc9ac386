// Command train fits a linear regression, data-parallel, on simulated TPU
// slices with package train: every host of the slice computes the gradient
// of its shard of the data, the workers average their gradients with a
// ring AllReduce, and rank 0 checkpoints the weights every 10 steps.
//
// It runs twice: on one v6e 4x4 slice (4 workers), where a host of the
// slice is killed at step 55, so the run releases the slice, reserves a
// fresh one and resumes from the checkpoint of step 50; and on two v6e 4x4
// slices at once (8 workers, multislice). Both converge to the known
// weights. Progress goes to stderr (a live line on a terminal), the
// results to stdout.
//
//	go run ./examples/train
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

// The known answer: y = TrueW·x + TrueB.
var (
	TrueW = []float64{2, -3, 0.5, 1.25}
	TrueB = 0.75
)

// Config is the training loop's configuration.
type Config struct {
	// Samples is the size of the whole data set, split among the workers.
	Samples int
	// Steps of gradient descent, with learning rate LR.
	Steps int
	LR    float64
	// CheckpointEvery is the number of steps between checkpoints.
	CheckpointEvery int
}

// State is what a checkpoint holds: the weights (with the bias last).
type State struct {
	W []float64 `json:"w"`
}

// Regression is the training loop every worker runs.
var Regression = train.NewLoop("examples.train.regression", func(ctx context.Context, w *train.Worker, cfg Config) error {
	xs, ys := shard(w.Rank(), w.WorldSize(), cfg.Samples)
	st := State{W: make([]float64, len(TrueW)+1)}
	data, err := w.LoadCheckpoint(ctx)
	if err != nil {
		return err
	}
	if data != nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	n := float64(cfg.Samples)
	for step := w.Iteration() + 1; step <= cfg.Steps; step++ {
		// The gradient of the mean squared error over the whole data set:
		// each worker sums its shard's part, and AllReduce adds them up.
		grad := make([]float64, len(st.W)+1) // the last element carries the loss
		for i, x := range xs {
			e := predict(st.W, x) - ys[i]
			for j, v := range x {
				grad[j] += 2 * e * v / n
			}
			grad[len(x)] += 2 * e / n
			grad[len(grad)-1] += e * e / n
		}
		if err := train.AllReduce(ctx, w, grad, train.Sum); err != nil {
			return err
		}
		for j := range st.W {
			st.W[j] -= cfg.LR * grad[j]
		}
		var ck []byte
		if w.Rank() == 0 && step%cfg.CheckpointEvery == 0 {
			if ck, err = json.Marshal(st); err != nil {
				return err
			}
		}
		if err := w.Report(ctx, train.Metrics{"loss": grad[len(grad)-1], "step": float64(step)}, ck); err != nil {
			return err
		}
	}
	return nil
})

func predict(w, x []float64) float64 {
	p := w[len(x)]
	for j, v := range x {
		p += w[j] * v
	}
	return p
}

// shard returns rank's share of the data set: sample i goes to rank
// i % world, and every sample is the same whatever the world size.
func shard(rank, world, samples int) (xs [][]float64, ys []float64) {
	for i := rank; i < samples; i += world {
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		x := make([]float64, len(TrueW))
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		xs = append(xs, x)
		ys = append(ys, predict(append(TrueW[:len(TrueW):len(TrueW)], TrueB), x))
	}
	return xs, ys
}

// clusterSpec is three v6e 4x4 slices (4 hosts of 4 chips each).
func clusterSpec() local.ClusterSpec {
	return local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 3}}}
}

var config = Config{Samples: 4096, Steps: 150, LR: 0.1, CheckpointEvery: 10}

func main() {
	ray.Main() // serve as a worker when a backend launched this binary as one
	ctx := context.Background()
	b, err := local.New(clusterSpec(), nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := run(ctx, b, c, os.Stdout, train.ProgressAuto); err != nil {
		log.Fatal(err)
	}
}

// Outcome is one fit's answer.
type Outcome struct {
	W      []float64
	Result *train.Result
}

func run(ctx context.Context, b *local.Backend, c *ray.Cluster, out io.Writer, progress train.Progress) error {
	// One slice, and a host of it dies at step 55.
	var killErr error
	one, err := fit(ctx, c, 1, progress, func(r train.Report) {
		if r.Attempt == 0 && r.Iteration == 55 {
			killErr = killHost(ctx, b, c, r.Slices[0], 1)
		}
	})
	if err != nil {
		return err
	}
	if killErr != nil {
		return killErr
	}
	fmt.Fprintf(out, "one v6e 4x4 slice, 4 workers:\n")
	report(out, one)

	two, err := fit(ctx, c, 2, progress, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\ntwo v6e 4x4 slices, 8 workers:\n")
	report(out, two)
	fmt.Fprintf(out, "\nknown answer: w=%.4f b=%.4f\n", TrueW, TrueB)
	return nil
}

// killHost simulates the loss of host worker of a slice.
func killHost(ctx context.Context, b *local.Backend, c *ray.Cluster, slice string, worker int) error {
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	for _, st := range states {
		if st.Name == slice {
			return b.KillNode(ctx, st.Hosts[worker].Node)
		}
	}
	return fmt.Errorf("no slice %s", slice)
}

// fit trains on n slices and returns the weights of the last checkpoint.
func fit(ctx context.Context, c *ray.Cluster, n int, progress train.Progress, onReport func(train.Report)) (*Outcome, error) {
	name := fmt.Sprintf("regression-%dslice", n)
	// An in-memory bucket that outlives Fit, so that the last checkpoint
	// can be read afterwards. A real run would set RunConfig.Storage to
	// "gs://bucket/prefix" (importing storage/gocloud and gcsblob).
	tr, err := train.New(c, Regression, config,
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: n},
		train.RunConfig{Name: name, MaxFailures: 2, Progress: progress, TotalIterations: config.Steps, OnReport: onReport, Bucket: storage.NewMem()})
	if err != nil {
		return nil, err
	}
	res, err := tr.Fit(ctx)
	if err != nil {
		return nil, err
	}
	data, err := res.Checkpoint.Load(ctx, 0)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	return &Outcome{W: st.W, Result: res}, nil
}

func report(out io.Writer, o *Outcome) {
	res := o.Result
	k := len(o.W) - 1
	fmt.Fprintf(out, "  w=%.4f b=%.4f after %d steps, %d attempt(s)\n", o.W[:k], o.W[k], res.Iteration, res.Attempts)
	for _, f := range res.Failures {
		fmt.Fprintf(out, "  attempt %d failed: a host of %s was lost (%v); resumed from the checkpoint of step %d on a fresh slice\n",
			f.Attempt, f.Slice, ray.CodeOf(f.Err), f.ResumeFrom)
	}
	maxErr := math.Abs(o.W[k] - TrueB)
	for j, v := range TrueW {
		maxErr = math.Max(maxErr, math.Abs(o.W[j]-v))
	}
	fmt.Fprintf(out, "  every weight within 1e-6 of the known answer: %v; final loss below 1e-12: %v\n", maxErr < 1e-6, res.Metrics["loss"] < 1e-12)
}
