package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

type elasticCfg struct{ Iters, Samples int }

// elasticLoop sums the sample indexes 0..Samples-1 every iteration, each
// rank its share (k ≡ rank mod world size), through an AllReduce: the sum
// is the same whatever the number of workers, so the final value is
// Iters times it however the run shrank and grew.
var elasticLoop = train.NewLoop("train_test.elastic", func(ctx context.Context, w *train.Worker, cfg elasticCfg) error {
	state := 0.0
	if data, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if data != nil {
		if err := json.Unmarshal(data, &state); err != nil {
			return err
		}
	}
	hosts := len(strings.Split(w.Getenv("TPU_WORKER_HOSTNAMES"), ","))
	megascale, _ := strconv.Atoi(w.Getenv("MEGASCALE_NUM_SLICES"))
	for it := w.Iteration(); it < cfg.Iters; it++ {
		g := []float64{0}
		for k := w.Rank(); k < cfg.Samples; k += w.WorldSize() {
			g[0] += float64(k)
		}
		if err := train.AllReduce(ctx, w, g, train.Sum); err != nil {
			return err
		}
		state += g[0]
		var ck []byte
		if w.Rank() == 0 {
			ck, _ = json.Marshal(state)
		}
		m := train.Metrics{"value": state, "world": float64(w.WorldSize()), "slices": float64(w.NumSlices()), "hosts": float64(hosts), "megascale": float64(megascale)}
		if err := w.Report(ctx, m, ck); err != nil {
			return err
		}
	}
	return nil
})

// TestElasticSlices: a run of 1 to 2 v6e 4x4 slices loses a host at
// iteration 4; no second slice can be had within ElasticWait, so it
// restarts from its checkpoint on the one slice left (4 workers, the env
// of a one-slice reservation); when the lost host comes back, the run
// grows back to two slices at its next checkpoint (a restart that is not
// a failure: MaxFailures 1 is not exceeded). The final answer is right.
func TestElasticSlices(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, c := newCluster(t, "4x4", 2, false)
	bucket := storage.NewMem()
	defer bucket.Close()
	var mu sync.Mutex
	var killed string
	var injectErr error
	restarted := false
	seen := map[int]train.Metrics{} // attempt: its first report's metrics
	onReport := func(r train.Report) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[r.Attempt]; !ok {
			seen[r.Attempt] = r.Metrics
		}
		switch {
		case r.Attempt == 0 && r.Iteration == 4:
			killed = hostOf(t, c, r.Slices[0], 1)
			injectErr = b.KillNode(ctx, killed)
		case len(r.Slices) == 1 && r.Iteration >= 9 && !restarted:
			restarted = true
			if injectErr = b.RestartNode(ctx, killed); injectErr != nil { // capacity is back
				return
			}
			// Hold rank 0's report (and so the next checkpoint) until the
			// run's reservation of the missing slice, pending since the
			// attempt's first checkpoint, holds it: a condition polled, up
			// to a minute, so that the run cannot end first.
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
				if growing(t, c) {
					break
				}
				if time.Now().After(deadline) {
					injectErr = errors.New("no slice reserved for growing within a minute")
					break
				}
			}
		}
	}
	const iters, samples = 16, 64
	tr, err := train.New(c, elasticLoop, elasticCfg{Iters: iters, Samples: samples},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2, MinSlices: 1, ElasticWait: time.Second, GrowAtCheckpoint: true},
		train.RunConfig{Name: "elastic", Bucket: bucket, MaxFailures: 1, Progress: train.ProgressOff, OnReport: onReport})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.NoErr(injectErr)
	is.Equal(res.SlicesPerAttempt, []int{2, 1, 2}) // shrank, then grew back
	is.Equal(res.Attempts, 3)
	is.Equal(len(res.Failures), 1) // the lost host; growing is not a failure
	is.Equal(res.Iteration, iters)
	is.Equal(res.Metrics["value"], float64(iters*samples*(samples-1)/2))
	for attempt, want := range []struct{ world, slices, megascale float64 }{{8, 2, 2}, {4, 1, 0}, {8, 2, 2}} {
		m := seen[attempt]
		is.Equal(m["world"], want.world)
		is.Equal(m["slices"], want.slices)
		is.Equal(m["megascale"], want.megascale) // MEGASCALE_NUM_SLICES of the attempt's reservation
		is.Equal(m["hosts"], 4.0)                // TPU_WORKER_HOSTNAMES: the hosts of the worker's slice
	}
	assertReleased(t, c)
}

// growing reports whether a slice is held by a run's reservation for
// growing ("<run>-attempt-<n>-grow").
func growing(t testing.TB, c *ray.Cluster) bool {
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Error(err)
		return true
	}
	for _, s := range states {
		if strings.HasSuffix(s.ReservedName, "-grow") {
			return true
		}
	}
	return false
}
