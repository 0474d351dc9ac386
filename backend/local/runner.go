package local

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// goroutineRunner is the cluster.Runner of the in-process mode: work runs on
// the runtime's goroutines, through the program's executor wrapped by the
// message-size limit (msglimit.go). No worker can be lost.
type goroutineRunner struct {
	limit int // Options.MaxMessageSize
}

var _ cluster.Runner = goroutineRunner{}

func (r goroutineRunner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	return &limitExecutor{Executor: exec, limit: r.limit}, nil
}

func (goroutineRunner) NodeUp(ctx context.Context, n cluster.Node) error { return nil }
func (goroutineRunner) NodeDown(name string)                             {}
func (goroutineRunner) Close() error                                     { return nil }
