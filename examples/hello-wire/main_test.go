package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOutput runs the example on the cluster its Wire injector builds, and
// checks that the cleanup the injector returns closes that cluster.
func TestOutput(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c, cleanup, err := initCluster(ctx, clusterSpec(), nil, nil)
	is.NoErr(err)
	var out bytes.Buffer
	is.NoErr(run(ctx, c, &out))
	is.Equal(out.String(), "square of 7: 49\n")

	cleanup()
	_, err = Square.Remote(ctx, c, 2).Get(ctx)
	is.True(errors.Is(err, ray.ErrClosed)) // the cleanup closed the cluster
}
