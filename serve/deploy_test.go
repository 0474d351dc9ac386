package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// A Deploy whose MinReplicas are not ready when its context ends says how
// many replicas were ready and what the others wait for (instead of a bare
// "context deadline exceeded"), and leaves nothing behind: the deployment
// is removed and its replicas' slices released.
func TestDeploySaysWhatItWaitedFor(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	startServer(t, srv)
	// Someone else holds one of the two slices.
	other, err := ray.NewSlicePlacementGroup(context.Background(), c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4, Name: "other"})
	is.NoErr(err)
	defer other.Release(context.Background())
	d := deployment("toomany")
	d.MinReplicas = 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = srv.Deploy(ctx, d)
	is.True(errors.Is(err, context.DeadlineExceeded))
	is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
	t.Log(err)
	// Typically "1 of 2 replicas (MinReplicas) ready, 1 starting, each
	// waiting for a v6e 2x4 slice (the cluster has 2 slices of that shape:
	// 0 free, 2 busy, 0 broken)"; the counts depend on how far the first
	// replica got on a loaded machine.
	is.True(strings.Contains(err.Error(), `serve: deploy "toomany": `))
	is.True(strings.Contains(err.Error(), ` of 2 replicas (MinReplicas) ready, `))
	is.True(strings.Contains(err.Error(), ` starting, each waiting for a v6e 2x4 slice (the cluster has 2 slices of that shape: `))
	is.True(strings.Contains(err.Error(), "the deployment was removed and holds nothing"))
	_, found := srv.Status().Deployment("toomany")
	is.True(!found)
	is.Equal(reservedSlices(t, c), 1) // the other's only: the ready replica's slice was released
}

// A Deploy whose MinReplicas the cluster can never hold fails at once with
// Infeasible, holding nothing, instead of waiting for its context.
func TestDeployInfeasible(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	startServer(t, srv)
	d := deployment("five")
	d.MinReplicas, d.MaxReplicas = 5, 5
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a guard: it must not wait
	defer cancel()
	err := srv.Deploy(ctx, d)
	t.Log(err)
	is.True(err != nil)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	is.True(errors.Is(err, ray.ErrInfeasible))
	is.True(ctx.Err() == nil) // at once, not when the guard ended
	is.True(strings.Contains(err.Error(), "Deployment.MinReplicas 5 can never be held"))
	is.True(strings.Contains(err.Error(), "at most 2"))
	_, found := srv.Status().Deployment("five")
	is.True(!found)
	is.Equal(reservedSlices(t, c), 0)

	// MinReplicas the cluster holds, with MaxReplicas beyond it, deploys.
	d.MinReplicas = 2
	is.NoErr(srv.Deploy(ctx, d))
}
