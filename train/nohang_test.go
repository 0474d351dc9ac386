package train_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

func newFakeCluster(t testing.TB) (*fake.Backend, *ray.Cluster) {
	t.Helper()
	b := fake.New(nil)
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}

// TestFitOnFake: a multi-rank run on the fake backend, which runs a task
// before its submission returns, runs to the end (it hung with rank 0
// waiting at the rendezvous for ranks never submitted), with a lost host
// scripted for the first worker task and a restart.
func TestFitOnFake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices int
	}{{"one v6e 4x4", 1}, {"two v6e 4x4", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			b, c := newFakeCluster(t)
			// The first worker task submitted fails as on a lost host.
			b.FailNext("goray.train.worker", 1, backend.Errorf(backend.Unavailable, "", "node lost"))
			bucket := storage.NewMem()
			defer bucket.Close()
			const iters = 6
			tr, err := train.New(c, counting, countCfg{Iters: iters, Len: 4},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: tc.slices},
				train.RunConfig{Name: "onfake", Bucket: bucket, Progress: train.ProgressOff, MaxFailures: 1})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.NoErr(err)
			n := 4 * tc.slices
			is.Equal(res.Metrics["value"], float64(iters*n*(n+1)/2)) // every rank took part in every AllReduce
			is.Equal(res.Iteration, iters)
			is.Equal(res.Attempts, 2)
			is.Equal(len(res.Failures), 1)
			is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
		})
	}
}

// TestRanksThatNeverJoin: on every backend, when ranks never reach the
// rendezvous, the attempt fails after StartTimeout with an error naming
// every one of them, instead of waiting for ever.
func TestRanksThatNeverJoin(t *testing.T) {
	for _, backendName := range []string{"local", "fake"} {
		t.Run(backendName, func(t *testing.T) {
			is := is.New(t)
			var c *ray.Cluster
			if backendName == "local" {
				_, c = newCluster(t, "4x4", 1, false)
			} else {
				_, c = newFakeCluster(t)
			}
			train.HoldWorker(func(ctx context.Context, rank int) {
				if rank == 1 || rank == 3 {
					<-ctx.Done() // released with the slices
				}
			})
			defer train.HoldWorker(nil)
			tr, err := train.New(c, counting, countCfg{Iters: 3, Len: 4},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Name: "nevercame", Storage: "mem://", Progress: train.ProgressOff, StartTimeout: time.Second})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), "ranks 1, 3 of 4 never joined the run's rendezvous within 1s (RunConfig.StartTimeout)")) // names them all
			is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
			is.Equal(len(res.Failures), 1)
			is.Equal(res.Failures[0].Rank, 1)
			assertReleased(t, c)
		})
	}
}
