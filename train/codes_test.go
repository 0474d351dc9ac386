package train_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

// badCalls records, from rank 0, the errors of calls with bad arguments
// inside a loop.
var badCalls sync.Map

var badArgs = train.NewLoop("train_test.badargs", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	xs := []float32{1, 2}
	errAllReduce := train.AllReduce(ctx, w, xs, train.Op(99))
	errBroadcast := train.Broadcast(ctx, w, xs, 99)
	_, _, errPosition := w.ShardPosition("nope")
	var errShard error
	for _, err := range train.DatasetShard[int](ctx, w, "nope") {
		errShard = err
		break
	}
	if w.Rank() == 0 {
		badCalls.Store("AllReduce with an unknown op", errAllReduce)
		badCalls.Store("Broadcast from a root that is no rank", errBroadcast)
		badCalls.Store("ShardPosition of a dataset the run lacks", errPosition)
		badCalls.Store("DatasetShard of a dataset the run lacks", errShard)
	}
	return nil
})

var unencodable = train.NewLoop("train_test.unencodable", func(context.Context, *train.Worker, chan int) error { return nil })

// TestErrorCodes: every error train returns carries a code of the closed
// set (ray.CodeOf), never Unknown.
func TestErrorCodes(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	_, c := newCluster(t, "4x4", 1, false)
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	run := train.RunConfig{Name: "codes", Storage: "mem://", Progress: train.ProgressOff}
	fit := func(tr *train.Trainer, err error) error {
		if err != nil {
			return err
		}
		_, err = tr.Fit(ctx)
		return err
	}
	file := filepath.Join(t.TempDir(), "file")
	is.NoErr(os.WriteFile(file, nil, 0o644))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	// A run with a checkpoint of rank 0 only.
	bucket := storage.NewMem()
	defer bucket.Close()
	tr, err := train.New(c, counting, countCfg{Iters: 2, Len: 2}, scaling, train.RunConfig{Name: "ck", Bucket: bucket, Progress: train.ProgressOff})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	// Calls with bad arguments inside a loop.
	tr, err = train.New(c, badArgs, struct{}{}, scaling, run)
	is.NoErr(err)
	_, err = tr.Fit(ctx)
	is.NoErr(err)
	loopErr := func(name string) error {
		v, ok := badCalls.Load(name)
		if !ok {
			return errors.New("not recorded")
		}
		err, _ := v.(error)
		return err
	}

	for _, tc := range []struct {
		name string
		err  error
		want ray.ErrorCode
	}{
		{"New with a nil loop", fit(train.New[countCfg](c, nil, countCfg{}, scaling, run)), ray.InvalidArgument},
		{"New with a nil cluster", fit(train.New(nil, counting, countCfg{}, scaling, run)), ray.InvalidArgument},
		{"New with a configuration JSON cannot encode", fit(train.New(c, unencodable, make(chan int), scaling, run)), ray.InvalidArgument},
		{"New with a topology v6e lacks", fit(train.New(c, counting, countCfg{}, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "3x3"}, run)), ray.InvalidArgument},
		{"New with MinSlices above NumSlices", fit(train.New(c, counting, countCfg{}, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 1, MinSlices: 2}, run)), ray.InvalidArgument},
		{"New with GrowAtCheckpoint on a run that is not elastic", fit(train.New(c, counting, countCfg{}, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", GrowAtCheckpoint: true}, run)), ray.InvalidArgument},
		{"New with a bad run name", fit(train.New(c, counting, countCfg{}, scaling, train.RunConfig{Name: "a/b"})), ray.InvalidArgument},
		{"NewProgram without a path", fit(train.NewProgram(c, train.Program{}, scaling, run)), ray.InvalidArgument},
		{"NewProgram with datasets", fit(train.NewProgram(c, train.Program{Path: "true"}, scaling,
			train.RunConfig{Datasets: train.Datasets{"d": train.Data(data.Range(10))}})), ray.InvalidArgument},
		{"Fit with storage of an unknown scheme", fit(train.New(c, counting, countCfg{}, scaling, train.RunConfig{Storage: "nope://x", Progress: train.ProgressOff})), ray.InvalidArgument},
		{"Fit with storage that is a file", fit(train.New(c, counting, countCfg{}, scaling, train.RunConfig{Storage: "file://" + file, Progress: train.ProgressOff})), ray.InvalidArgument},
		{"Fit with a cancelled context", func() error {
			tr, err := train.New(c, counting, countCfg{Iters: 1, Len: 1}, scaling, run)
			if err != nil {
				return err
			}
			_, err = tr.Fit(cancelled)
			return err
		}(), ray.Canceled},
		{"Fit of a run whose loop fails", fit(train.New(c, failing, collCfg{Len: 10, FailAt: 1, Results: "codes", Op: "Barrier"}, scaling, run)), ray.TaskFailed},
		{"Checkpoint.Load without storage", func() error { _, err := (&train.Checkpoint{}).Load(ctx, 0); return err }(), ray.FailedPrecondition},
		{"Checkpoint.Load of a rank without data", func() error { _, err := res.Checkpoint.Load(ctx, 1); return err }(), ray.NotFound},
		{"WorkerFailedError", &train.WorkerFailedError{Rank: 3, Cause: "lost"}, ray.Unavailable},
		{"DatasetShard without a worker", func() error {
			for _, err := range train.DatasetShard[int](ctx, nil, "d") {
				return err
			}
			return nil
		}(), ray.InvalidArgument},
		{"AllReduce with an unknown op", loopErr("AllReduce with an unknown op"), ray.InvalidArgument},
		{"Broadcast from a root that is no rank", loopErr("Broadcast from a root that is no rank"), ray.InvalidArgument},
		{"ShardPosition of a dataset the run lacks", loopErr("ShardPosition of a dataset the run lacks"), ray.NotFound},
		{"DatasetShard of a dataset the run lacks", loopErr("DatasetShard of a dataset the run lacks"), ray.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			is.True(tc.err != nil)
			t.Log(tc.err)
			is.Equal(ray.CodeOf(tc.err).String(), tc.want.String())
		})
	}
	is.True(errors.Is(&train.WorkerFailedError{}, train.ErrWorkerFailed)) // still matches its sentinel
}
