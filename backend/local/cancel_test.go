package local_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// TestCancelTask: a running, queued or input-waiting task is stopped with
// code Canceled and not retried; a finished one is not affected.
func TestCancelTask(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 1}}}}, nil)
	is.NoErr(err)
	ctx := testCtx(t)
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	running := parkTask.Remote(ctx, c, struct{}{}, ray.Retries(3)) // holds the only CPU
	<-parked
	queued := boundedAdd.Remote(ctx, c, 1)
	waiting := boundedAdd.RemoteRef(ctx, c, queued)
	done := ray.Put(ctx, c, 5)

	is.NoErr(b.CancelTask(ctx, waiting.ID(), backend.CancelOptions{}))
	is.NoErr(b.CancelTask(ctx, queued.ID(), backend.CancelOptions{}))
	is.NoErr(b.CancelTask(ctx, running.ID(), backend.CancelOptions{}))
	for _, r := range []ray.ObjectRef[int]{running, queued, waiting} {
		_, err := r.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Canceled) // not retried
	}
	is.Equal(ray.CodeOf(b.CancelTask(ctx, done.ID(), backend.CancelOptions{})), ray.NotFound) // not a task
	v, err := boundedAdd.Remote(ctx, c, 41).Get(ctx)                                          // the CPU is free again
	is.NoErr(err)
	is.Equal(v, 42)
	finished := boundedAdd.Remote(ctx, c, 1)
	_, err = finished.Get(ctx)
	is.NoErr(err)
	is.NoErr(b.CancelTask(ctx, finished.ID(), backend.CancelOptions{}))
	v, err = finished.Get(ctx)
	is.NoErr(err)
	is.Equal(v, 2)
}
