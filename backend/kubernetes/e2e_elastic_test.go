//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

type k8sElasticCfg struct {
	Iters, Samples int
	Pause          time.Duration
}

// k8sElastic sums the sample indexes 0..Samples-1 each iteration, each
// rank its share (k ≡ rank mod world size), through an AllReduce: the
// sum does not depend on the number of workers, so after Iters
// iterations it is Iters times the sum however the run shrank and grew.
var k8sElastic = train.NewLoop("k8stest.elastic", func(ctx context.Context, w *train.Worker, cfg k8sElasticCfg) error {
	sum := 0.0
	if data, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if data != nil {
		if err := json.Unmarshal(data, &sum); err != nil {
			return err
		}
	}
	for it := w.Iteration(); it < cfg.Iters; it++ {
		xs := []float64{0}
		for k := w.Rank(); k < cfg.Samples; k += w.WorldSize() {
			xs[0] += float64(k)
		}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		sum += xs[0]
		var ck []byte
		if w.Rank() == 0 {
			ck, _ = json.Marshal(sum)
		}
		if err := w.Report(ctx, train.Metrics{"sum": sum, "world": float64(w.WorldSize())}, ck); err != nil {
			return err
		}
		select {
		case <-time.After(cfg.Pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
})

// TestE2EElasticTrainShrinksAndGrows: an elastic run of 1 to 2 v6e 4x4
// Spot slices, made on demand by the harness's autoscaler, loses a pool to
// a preemption at iteration 5 while the TPU quota allows only the pool
// left: no second slice comes within ElasticWait, so the run goes on from
// its checkpoint on one slice (4 workers). Once the quota is raised, the
// run's reservation of the missing slice gets a new pool, and the run
// grows back to two slices at its next checkpoint. The answer is exact.
func TestE2EElasticTrainShrinksAndGrows(t *testing.T) {
	is := is.New(t)
	const accel = "tpu-v6e-slice"
	cp, as := startAutoscaledHarnessIn(t, kubeharness.NetworkIsolated,
		kubeharness.AutoscalerOptions{Quota: map[string]int{accel: 32}, ScaleDownAfter: time.Minute})
	_, c := provisioningCluster(t, driverConfig(t, cp), "driver-a", ProvisionConfig{Mode: ProvisionPods, Spot: true}, func(cfg *Config) {
		cfg.DriverHost = cp.HostIP()
	})
	ctx := t.Context()
	// Two pools up front, so that the first attempt finds both within
	// ElasticWait on a loaded machine.
	warm, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2, Timeout: 2 * time.Minute})
	is.NoErr(err)
	is.NoErr(warm.Release(ctx))

	var preempted string
	var injectErr error
	raised, held := false, false
	inject := func(r train.Report) {
		switch {
		case r.Attempt == 0 && r.Iteration == 5 && preempted == "":
			as.SetQuota(accel, 16) // the pool left is all the quota allows
			preempted = r.Slices[0]
			injectErr = as.Preempt(ctx, preempted)
		case len(r.Slices) == 1 && r.Iteration >= 8 && !raised:
			raised = true
			as.SetQuota(accel, 32) // capacity is back
		case raised && len(r.Slices) == 1 && !held:
			// Hold rank 0's report (and so the next checkpoint) until the
			// run's reservation of the missing slice, pending since the
			// attempt's first checkpoint, holds a new pool: a condition
			// polled, up to two minutes, so that the run cannot end first.
			held = true
			injectErr = waitForGrowReservation(ctx, c, 2*time.Minute)
		}
	}
	const iters, samples = 20, 64
	tr, err := train.New(c, k8sElastic, k8sElasticCfg{Iters: iters, Samples: samples, Pause: 100 * time.Millisecond},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2, MinSlices: 1, ElasticWait: 10 * time.Second,
			GrowAtCheckpoint: true, ReserveTimeout: 2 * time.Minute},
		train.RunConfig{Name: "elastic", Progress: train.ProgressOff, MaxFailures: 1, OnReport: inject, StartTimeout: 2 * time.Minute})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	t.Logf("autoscaler: %v", as.Events())
	is.NoErr(err)
	is.NoErr(injectErr)
	is.Equal(res.SlicesPerAttempt, []int{2, 1, 2}) // shrank to the slice left, grew back
	is.Equal(len(res.Failures), 1)                 // the preemption; growing is no failure
	is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
	is.Equal(res.Metrics["sum"], float64(iters*samples*(samples-1)/2))
	is.Equal(res.Metrics["world"], 8.0)
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// waitForGrowReservation waits until a slice is held by a train run's
// reservation for growing (named "<run>-attempt-<n>-grow").
func waitForGrowReservation(ctx context.Context, c *ray.Cluster, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		states, err := ray.TPUSlices(ctx, c)
		if err != nil {
			return err
		}
		for _, s := range states {
			if strings.HasSuffix(s.ReservedName, "-grow") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no slice reserved for growing after %v: %+v", limit, states)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
