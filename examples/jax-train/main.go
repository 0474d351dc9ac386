// Command jax-train runs a Python training program, written for JAX, on
// every host of a TPU slice with train.NewProgram, on goray's simulator:
// four processes (one per host of a v6e 4x4) train a linear regression
// data-parallel, report their loss every step and commit a checkpoint
// every 10 steps through goray_train (the report protocol's Python
// client, which goray puts on every program's PYTHONPATH). A host is killed
// at step 35: the run releases the slice, reserves the other one, and
// every process resumes from the checkpoint of step 30.
//
// train.py uses JAX when it is installed (jax.distributed.initialize with
// what goray's env gives, jax.grad, and multihost_utils to average the
// gradients across hosts) and a pure-Python step otherwise, so that it
// runs wherever python3 does. On GKE the same driver runs with the
// kubernetes backend; docs/kubernetes.md has the walk-through.
//
//	go run ./examples/jax-train            # needs python3
//	go run ./examples/jax-train -kill-at 0 # no failure
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"path/filepath"
	"runtime"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// The known answer of train.py's data: y = TrueW·x + TrueB.
var (
	TrueW = []float64{2, -3, 0.5, 1.25}
	TrueB = 0.75
)

// Options are the example's settings.
type Options struct {
	Python  string // the interpreter
	Program string // train.py; empty means the one next to this file
	Steps   int
	Every   int // steps between checkpoints
	KillAt  int // the step at which a host dies (0: none)
	Storage string
	// Progress and Output are the run's progress mode and where the
	// programs' output goes.
	Progress train.Progress
	Output   io.Writer
}

// Outcome is what the example reports.
type Outcome struct {
	Result *train.Result
	// Params are w then b, read from the last checkpoint's directory.
	Params []float64
}

func main() {
	o := Options{Progress: train.ProgressAuto, Output: os.Stderr}
	flag.StringVar(&o.Python, "python", "python3", "the Python interpreter (JAX is used when it imports)")
	flag.StringVar(&o.Program, "program", "", "the training program (default: train.py of this example's source directory)")
	flag.IntVar(&o.Steps, "steps", 80, "training steps")
	flag.IntVar(&o.Every, "every", 10, "steps between checkpoints")
	flag.IntVar(&o.KillAt, "kill-at", 35, "the step at which a host of the slice dies (0: none)")
	flag.StringVar(&o.Storage, "storage", "", "checkpoint directory (default: a temporary one, removed at the end)")
	flag.Parse()
	if o.Storage == "" {
		dir, err := os.MkdirTemp("", "jax-train-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		o.Storage = dir
	}
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	out, err := Run(context.Background(), b, c, o)
	if err != nil {
		log.Fatal(err)
	}
	Print(os.Stdout, out)
}

// Run trains, killing a host at o.KillAt.
func Run(ctx context.Context, b *local.Backend, c *ray.Cluster, o Options) (*Outcome, error) {
	script := o.Program
	if script == "" {
		_, file, _, _ := runtime.Caller(0) // go run: the source directory
		script = filepath.Join(filepath.Dir(file), "train.py")
	}
	var killErr error
	onReport := func(r train.Report) {
		// Rank 0's report waits for this: its process is alive while its
		// host is killed, and the others wait for it at the next
		// gradient exchange.
		if o.KillAt > 0 && r.Attempt == 0 && r.Iteration == o.KillAt {
			killErr = killHost(ctx, b, c, r.Slices[0], 0)
		}
	}
	tr, err := train.NewProgram(c, train.Program{Path: o.Python, Args: []string{script, fmt.Sprint(o.Steps), fmt.Sprint(o.Every)}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "jax-regression", Storage: "file://" + o.Storage, MaxFailures: 2, KeepCheckpoints: 2,
			Progress: o.Progress, TotalIterations: o.Steps, OnReport: onReport, Output: o.Output})
	if err != nil {
		return nil, err
	}
	res, err := tr.Fit(ctx)
	if err != nil {
		return nil, err
	}
	if killErr != nil {
		return nil, killErr
	}
	dir, err := res.Checkpoint.Dir(0)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "params.json"))
	if err != nil {
		return nil, err
	}
	out := &Outcome{Result: res}
	return out, json.Unmarshal(data, &out.Params)
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

// MaxError is the largest distance of a parameter from the known answer.
func (o *Outcome) MaxError() float64 {
	k := len(o.Params) - 1
	e := math.Abs(o.Params[k] - TrueB)
	for j, w := range TrueW {
		e = math.Max(e, math.Abs(o.Params[j]-w))
	}
	return e
}

// Print writes the outcome.
func Print(w io.Writer, o *Outcome) {
	res := o.Result
	k := len(o.Params) - 1
	fmt.Fprintf(w, "w=%.4f b=%.4f after %d steps, %d attempt(s), final loss %.3g\n", o.Params[:k], o.Params[k], res.Iteration, res.Attempts, res.Metrics["loss"])
	for _, f := range res.Failures {
		fmt.Fprintf(w, "attempt %d failed: a host of %s was lost (%v); resumed from the checkpoint of step %d on a fresh slice\n",
			f.Attempt, f.Slice, ray.CodeOf(f.Err), f.ResumeFrom)
	}
	fmt.Fprintf(w, "known answer: w=%.4f b=%.4f; every parameter within 1e-6: %v\n", TrueW, TrueB, o.MaxError() < 1e-6)
}
