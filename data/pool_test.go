package data_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
)

// constructed counts the constructor calls of countedClass: its model
// loads.
var constructed atomic.Int64

type counted struct{ slice string }

var (
	countedClass = ray.NewActorClass("data_test.counted", func(ctx context.Context, _ int) (*counted, error) {
		constructed.Add(1)
		rc, _ := ray.Runtime(ctx)
		return &counted{slice: rc.Env("TPU_NAME")}, nil
	})
	countedInfer = data.NewBatchMethod(countedClass, "infer", func(_ context.Context, a *counted, xs []int) ([]int, error) {
		out := make([]int, len(xs))
		for i, x := range xs {
			out[i] = 2 * x
		}
		return out, nil
	})
)

// A pool at a steady load keeps the actors, and the slices, it reserved:
// over a run that needs both slices, reservations are at most the peak
// number of actors plus one, and each actor's constructor runs once (the
// pool used to stop an actor whenever two were idle for a moment, and to
// start one whenever a batch waited: 13 to 17 reservations for 2 actors
// in examples/batch-inference).
func TestPoolKeepsWhatItReserved(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	v6e := &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"}
	for _, tt := range []struct {
		name  string
		slice *ray.SliceSpec
		max   int
	}{{"slices", v6e, 2}, {"cpu", nil, 4}} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			constructed.Store(0)
			pool := data.Pool[*counted, int]{Cluster: c, Class: countedClass, Min: 1, Max: tt.max, Slice: tt.slice,
				GrowAfter: 2 * time.Millisecond}
			const n = 20000
			var st data.Stats
			got, err := data.Count(ctx, data.ApplyPool(data.Range(n), pool, countedInfer, data.BatchSize(32)),
				data.CollectStats(&st), data.Progress(false))
			is.NoErr(err)
			is.Equal(got, int64(n))
			p := st.Operators[1].Pool
			t.Logf("%+v", *p)
			is.Equal(int64(p.Started), constructed.Load()) // each actor's constructor ran once
			is.True(p.Started <= p.Peak+1)                 // no churn
			is.Equal(p.Stopped, p.Started)
			if tt.slice != nil {
				is.Equal(p.SlicesReserved, p.Started)
			}
			checkReleased(t, c)
		})
	}
}
