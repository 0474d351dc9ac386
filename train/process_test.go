package train_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// jaxCheck checks that the worker's env gives JAX (its GkeTpuCluster
// rules: the worker list is TPU_PROCESS_ADDRESSES, else
// TPU_WORKER_HOSTNAMES; process ID = TPU_WORKER_ID + MEGASCALE_SLICE_ID ×
// len(list); count = len(list) × MEGASCALE_NUM_SLICES) the worker's rank
// and the world size, and that two processes of a v7x host listen on
// their own ports.
var jaxCheck = train.NewLoop("train_test.jax", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	list := w.Getenv("TPU_PROCESS_ADDRESSES")
	if list == "" {
		list = w.Getenv("TPU_WORKER_HOSTNAMES")
	}
	n := len(strings.Split(list, ","))
	wid, _ := strconv.Atoi(w.Getenv("TPU_WORKER_ID"))
	slices, slice := 1, 0
	if w.Getenv("MEGASCALE_COORDINATOR_ADDRESS") != "" {
		slices, _ = strconv.Atoi(w.Getenv("MEGASCALE_NUM_SLICES"))
		slice, _ = strconv.Atoi(w.Getenv("MEGASCALE_SLICE_ID"))
	}
	if id, count := wid+slice*n, n*slices; id != w.Rank() || count != w.WorldSize() {
		return fmt.Errorf("rank %d of %d: JAX would see process %d of %d", w.Rank(), w.WorldSize(), id, count)
	}
	if port := w.Getenv("TPU_PROCESS_PORT"); port != strconv.Itoa(8471+w.Rank()%2) {
		return fmt.Errorf("rank %d: TPU_PROCESS_PORT=%s", w.Rank(), port)
	}
	return w.Barrier(ctx)
})

// On v7x, ResourcesPerWorker {TPU: 2} runs one worker per TPU process
// (two per host), each with the env JAX needs to count and number it.
func TestOneWorkerPerV7xProcess(t *testing.T) {
	for _, slices := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d slices", slices), func(t *testing.T) {
			is := is.New(t)
			b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v7x", Topology: "2x2x2", Count: 2}}}, nil)
			is.NoErr(err)
			c, err := ray.NewCluster(context.Background(), b, nil)
			is.NoErr(err)
			t.Cleanup(func() { c.Close() })
			tr, err := train.New(c, jaxCheck, struct{}{},
				train.ScalingConfig{AcceleratorVersion: "v7x", Topology: "2x2x2", NumSlices: slices, ResourcesPerWorker: ray.Resources{ray.TPU: 2}, NumWorkers: 4 * slices},
				train.RunConfig{Progress: train.ProgressOff})
			is.NoErr(err)
			_, err = tr.Fit(context.Background())
			is.NoErr(err)
			assertReleased(t, c)
		})
	}
	t.Run("wrong chips per worker", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		_, err := train.New(c, jaxCheck, struct{}{},
			train.ScalingConfig{AcceleratorVersion: "v7x", Topology: "2x2x2", ResourcesPerWorker: ray.Resources{ray.TPU: 1}},
			train.RunConfig{Progress: train.ProgressOff})
		is.True(err != nil)
		t.Log(err)
		is.True(strings.Contains(err.Error(), "or one of its 2 TPU processes (2 chips)"))
	})
}
