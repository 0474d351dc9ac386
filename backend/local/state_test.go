package local_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var parked = make(chan struct{})

var parkTask = ray.NewTask("localtest.park", func(ctx context.Context, _ struct{}) (int, error) {
	parked <- struct{}{}
	<-ctx.Done()
	return 0, ctx.Err()
})

// TestSnapshotShowsRunningWork: the snapshot names running work per node
// and accounts its resources.
func TestSnapshotShowsRunningWork(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	is.NoErr(err)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	parkTask.Remote(ctx, c, struct{}{}, ray.Name("trainer-step"), ray.Resources{ray.CPU: 3})
	<-parked
	snap, err := c.Snapshot(ctx)
	is.NoErr(err)
	is.Equal(snap.Running, 1)
	is.Equal(snap.Nodes[0].Tasks, []string{"trainer-step"})
	is.Equal(snap.Nodes[0].Free[backend.CPU], 1.0)
}
