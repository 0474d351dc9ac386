package local_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var failNumbered = ray.NewTask("localtest.failNumbered", func(ctx context.Context, i int) (int, error) {
	return 0, fmt.Errorf("failure %d", i)
})

var parkedForKill = make(chan struct{})

var parkForKill = ray.NewTask("localtest.parkForKill", func(ctx context.Context, _ struct{}) (int, error) {
	parkedForKill <- struct{}{}
	<-ctx.Done()
	return 0, ctx.Err()
})

// TestSnapshotRecentFailures: the snapshot keeps the last RecentFailures
// failed attempts, newest last, including attempts lost with their node.
func TestSnapshotRecentFailures(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		want     int // listed
	}{
		{"none", 0, 0},
		{"some", 3, 3},
		{"exactly the bound", backend.RecentFailures, backend.RecentFailures},
		{"beyond the bound", backend.RecentFailures + 17, backend.RecentFailures},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newFailuresCluster(t)
			ctx := context.Background()
			for i := range tt.failures {
				_, err := failNumbered.Remote(ctx, c, i).Get(ctx)
				is.Equal(ray.CodeOf(err), ray.TaskFailed)
			}
			snap, err := c.Snapshot(ctx)
			is.NoErr(err)
			is.Equal(len(snap.Failures), tt.want)
			for i, f := range snap.Failures { // the newest, oldest first
				is.Equal(f.Task, "localtest.failNumbered")
				is.Equal(f.Code, backend.TaskFailed)
				is.Equal(f.Node, "n")
				n := tt.failures - tt.want + i
				is.True(strings.Contains(f.Message, fmt.Sprintf("failure %d", n)))
			}
		})
	}
	t.Run("a killed node's running task", func(t *testing.T) {
		is := is.New(t)
		b, c := newFailuresCluster(t)
		ctx := context.Background()
		ref := parkForKill.Remote(ctx, c, struct{}{}, ray.Name("doomed"), ray.Retries(0))
		<-parkedForKill
		is.NoErr(b.KillNode(ctx, "n"))
		_, err := ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		snap, err := c.Snapshot(ctx)
		is.NoErr(err)
		is.Equal(len(snap.Failures), 1)
		f := snap.Failures[0]
		is.Equal(f.Task, "doomed")
		is.Equal(f.Code, backend.Unavailable)
		is.Equal(f.Node, "n")
	})
}

func newFailuresCluster(t *testing.T) (*local.Backend, *ray.Cluster) {
	t.Helper()
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}
