package clustertest

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// Runner is a [cluster.Runner] that runs every task attempt, actor and
// call on the goroutines of this process, with the program's executor as
// it is: no worker can be lost, so it never calls its LostFunc. Its zero
// value is ready to use.
type Runner struct{}

var _ cluster.Runner = Runner{}

// Start implements cluster.Runner: it returns exec unchanged.
func (Runner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	return exec, nil
}

// NodeUp implements cluster.Runner; there is nothing to start.
func (Runner) NodeUp(ctx context.Context, n cluster.Node) error { return nil }

// NodeDown implements cluster.Runner.
func (Runner) NodeDown(name string) {}

// Close implements cluster.Runner.
func (Runner) Close() error { return nil }
