package cluster

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

// GoroutineRunner is a [Runner] that runs every task attempt, actor and
// call on the goroutines of this process, with the program's executor as
// it is: no worker can be lost, so it never calls its LostFunc. Its zero
// value is ready to use.
type GoroutineRunner struct{}

var _ Runner = GoroutineRunner{}

// Start implements [Runner]: it returns exec unchanged.
func (GoroutineRunner) Start(ctx context.Context, exec backend.Executor, lost LostFunc) (backend.Executor, error) {
	return exec, nil
}

// NodeUp implements [Runner]; there is nothing to start.
func (GoroutineRunner) NodeUp(ctx context.Context, n Node) error { return nil }

// NodeDown implements [Runner].
func (GoroutineRunner) NodeDown(name string) {}

// Close implements [Runner].
func (GoroutineRunner) Close() error { return nil }
