//go:build e2e

package kubernetes

import (
	"context"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// k8sAllReduce sums (rank+1) over every rank for iters iterations,
// checking each host's TPU env names its pods by their DNS names, and
// reports the vector's first element.
var k8sAllReduce = train.NewLoop("k8stest.allreduce", func(ctx context.Context, w *train.Worker, iters int) error {
	for _, h := range strings.Split(w.Getenv("TPU_WORKER_HOSTNAMES"), ",") {
		if !strings.HasSuffix(h, ".svc") {
			return &train.WorkerFailedError{Rank: w.Rank(), Cause: "TPU_WORKER_HOSTNAMES names " + h + ", not a pod's DNS name"}
		}
	}
	state := make([]float64, 4)
	for it := w.Iteration(); it < iters; it++ {
		xs := []float64{float64(w.Rank() + 1), 1, 1, 1}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		for i := range state {
			state[i] += xs[i]
		}
		if err := w.Report(ctx, train.Metrics{"sum": state[0], "ranks": xs[1]}, nil); err != nil {
			return err
		}
	}
	return nil
})

// TestE2ETrainAllReduce: train on 2 × v6e 4x4 (8 worker pods) on a real
// control plane, with the rendezvous where the backend says workers reach
// the driver (Config.DriverHost here: the test process is outside the
// cluster): every rank joins, AllReduce sums across the 8 pods, the
// result is exact, and the slices and pods are released.
func TestE2ETrainAllReduce(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "4x4", []string{"slice-a", "slice-b"}, func(cfg *Config) {
		cfg.DriverHost = "127.0.0.1" // the harness's pods reach the test process on loopback
	})

	tr, err := train.New(c, k8sAllReduce, 5, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
		train.RunConfig{Name: "e2e", Progress: train.ProgressOff})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.Equal(res.Metrics["ranks"], 8.0)  // 8 pods took part
	is.Equal(res.Metrics["sum"], 5*36.0) // 5 iterations of 1+2+...+8
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		is.Equal(st.ReservedBy, ray.PlacementGroupID(0))
	}
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
