package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/serve"
)

// A Deploy whose MinReplicas the cluster cannot hold says, when its
// context ends, how many replicas were ready and what the others wait for
// (instead of a bare "context deadline exceeded").
func TestDeploySaysWhatItWaitedFor(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	startServer(t, srv)
	d := deployment("toomany")
	d.MinReplicas = 2
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := srv.Deploy(ctx, d)
	is.True(errors.Is(err, context.DeadlineExceeded))
	t.Log(err)
	is.True(strings.Contains(err.Error(), `serve: deploy "toomany": 1 of 2 replicas (MinReplicas) ready, 1 starting, each waiting for a v6e 2x4 slice (the cluster has 1 slices of that shape: 0 free, 1 busy, 0 broken)`))
	is.True(strings.Contains(err.Error(), "it keeps starting in the background"))
}
