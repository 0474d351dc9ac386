package raywire_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/ray/raywire"
)

var double = ray.NewTask("raywire_test.double", func(ctx context.Context, x int) (int, error) {
	return 2 * x, nil
})

// TestProvideCluster: the provider starts a cluster and its cleanup closes
// it; a backend that cannot start is an error with no cleanup to call.
func TestProvideCluster(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 2}}}}, nil)
	is.NoErr(err)
	c, cleanup, err := raywire.ProvideCluster(ctx, b, nil)
	is.NoErr(err)
	v, err := double.Remote(ctx, c, 21).Get(ctx)
	is.NoErr(err)
	is.Equal(v, 42)
	cleanup()
	_, err = double.Remote(ctx, c, 1).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition) // closed by the cleanup

	c, cleanup, err = raywire.ProvideCluster(ctx, nil, nil)
	is.True(err != nil)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	is.True(c == nil && cleanup == nil)
}
