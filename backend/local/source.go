package local

import (
	"context"
	"sync"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/core"
)

// staticSource is the core.NodeSource of a ClusterSpec: its nodes are
// reported once, when the runtime starts, and change only by fault
// injection (Kill, Restore, Drain) and the process runner's restarts.
type staticSource struct {
	nodes  []core.Node
	byName map[string]core.Node
	synced chan struct{} // closed once Run has reported every node

	mu   sync.Mutex // orders reports; guards sink
	sink core.NodeSink
}

var (
	_ core.NodeSource = (*staticSource)(nil)
	_ core.Syncer     = (*staticSource)(nil)
)

func newStaticSource(nodes []core.Node) *staticSource {
	s := &staticSource{nodes: nodes, byName: make(map[string]core.Node, len(nodes)), synced: make(chan struct{})}
	for _, n := range nodes {
		s.byName[n.Name] = n
	}
	return s
}

// Run implements core.NodeSource: it reports every node, then waits for
// ctx to end.
func (s *staticSource) Run(ctx context.Context, sink core.NodeSink) error {
	s.mu.Lock()
	s.sink = sink
	for _, n := range s.nodes {
		sink.NodeAdded(n)
	}
	close(s.synced)
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.sink = nil
	s.mu.Unlock()
	return nil
}

// Synced implements core.Syncer.
func (s *staticSource) Synced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Add implements core.NodeSource: a static cluster does not grow.
func (s *staticSource) Add(ctx context.Context, n core.Node) error {
	return backend.Errorf(backend.Unimplemented, "add node "+n.Name, "a local cluster's nodes are fixed by its ClusterSpec")
}

// Drain implements core.NodeSource.
func (s *staticSource) Drain(ctx context.Context, name string) error {
	return s.report("drain node "+name, name, func(sink core.NodeSink, _ core.Node) { sink.NodeDraining(name) })
}

// Kill implements core.NodeSource: the node dies as a failed host does.
func (s *staticSource) Kill(ctx context.Context, name string) error {
	return s.report("kill node "+name, name, func(sink core.NodeSink, _ core.Node) { sink.NodeLost(name, nil) })
}

// Restore implements core.NodeSource: a dead node comes back, empty.
func (s *staticSource) Restore(ctx context.Context, name string) error {
	return s.report("restart node "+name, name, func(sink core.NodeSink, n core.Node) { sink.NodeAdded(n) })
}

func (s *staticSource) report(op, name string, f func(core.NodeSink, core.Node)) error {
	n, ok := s.byName[name]
	if !ok {
		return backend.Errorf(backend.NotFound, op, "no node named %q", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sink == nil {
		return backend.Errorf(backend.FailedPrecondition, op, "backend not started or closed")
	}
	f(s.sink, n)
	return nil
}
