package train_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

// unavailableReserver is the fake backend whose slice reservations, after
// the first ok ones, fail with Unavailable fail times, as a Kubernetes
// backend's do while the API server is away.
type unavailableReserver struct {
	*fake.Backend
	ok, fail int64
	calls    atomic.Int64
}

func (b *unavailableReserver) ReserveSlices(ctx context.Context, req *backend.SliceRequest) (*backend.SliceReservation, error) {
	if n := b.calls.Add(1); n > b.ok && n <= b.ok+b.fail {
		return nil, backend.Errorf(backend.Unavailable, backend.ReserveSlicesOp(req.Name), "claim slices: dial tcp 10.0.0.1:6443: connect: connection refused")
	}
	return b.Backend.ReserveSlices(ctx, req)
}

// TestRestartWaitsForUnavailableCluster: a run whose restart's reservation
// fails with Unavailable (the control plane away) asks again until it
// succeeds within ReserveTimeout, and the run finishes in its second
// attempt; a reservation that stays Unavailable for ReserveTimeout fails
// the run with Unavailable, saying how often it was tried.
func TestRestartWaitsForUnavailableCluster(t *testing.T) {
	run := func(t *testing.T, fail int64, timeout time.Duration) (*unavailableReserver, *train.Result, error) {
		b := &unavailableReserver{Backend: fake.New(nil), ok: 1, fail: fail}
		c, err := ray.NewCluster(context.Background(), b, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// The first worker task fails as on a lost host: the run restarts.
		b.FailNext("goray.train.worker", 1, backend.Errorf(backend.Unavailable, "", "node lost"))
		bucket := storage.NewMem()
		t.Cleanup(func() { bucket.Close() })
		tr, err := train.New(c, counting, countCfg{Iters: 3, Len: 4},
			train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", ReserveTimeout: timeout},
			train.RunConfig{Name: "unavailable", Bucket: bucket, Progress: train.ProgressOff, MaxFailures: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := tr.Fit(context.Background())
		return b, res, err
	}
	t.Run("back within ReserveTimeout", func(t *testing.T) {
		is := is.New(t)
		b, res, err := run(t, 3, time.Minute)
		is.NoErr(err)
		is.Equal(b.calls.Load(), int64(5)) // the first attempt's, three failed, the restart's
		is.Equal(res.Attempts, 2)
		is.Equal(len(res.Failures), 1) // the lost host only
		is.Equal(res.Metrics["value"], float64(3*4*5/2))
	})
	t.Run("away for longer", func(t *testing.T) {
		is := is.New(t)
		b, _, err := run(t, 1<<40, 500*time.Millisecond)
		is.True(err != nil)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.True(strings.Contains(err.Error(), "connection refused"))
		is.True(strings.Contains(err.Error(), "tries over"))
		is.True(b.calls.Load() > 2) // asked again before giving up
	})
}
