package local

import (
	"context"
	"sync"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// staticSource is the cluster.NodeSource of a ClusterSpec: its nodes are
// reported once, when the runtime starts, and change only by fault
// injection (Kill, Restore, Drain) and the process runner's restarts.
type staticSource struct {
	nodes  []cluster.Node
	byName map[string]cluster.Node
	synced chan struct{} // closed once Run has reported every node

	mu   sync.Mutex // orders reports; guards sink
	sink cluster.NodeSink
}

var (
	_ cluster.NodeSource = (*staticSource)(nil)
	_ cluster.Syncer     = (*staticSource)(nil)
)

func newStaticSource(nodes []cluster.Node) *staticSource {
	s := &staticSource{nodes: nodes, byName: make(map[string]cluster.Node, len(nodes)), synced: make(chan struct{})}
	for _, n := range nodes {
		s.byName[n.Name] = n
	}
	return s
}

// Run implements cluster.NodeSource: it reports every node, then waits for
// ctx to end.
func (s *staticSource) Run(ctx context.Context, sink cluster.NodeSink) error {
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

// Synced implements cluster.Syncer.
func (s *staticSource) Synced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Add implements cluster.NodeSource: a static cluster does not grow.
func (s *staticSource) Add(ctx context.Context, n cluster.Node) error {
	return backend.Errorf(backend.Unimplemented, "add node "+n.Name, "a local cluster's nodes are fixed by its ClusterSpec")
}

// Drain implements cluster.NodeSource.
func (s *staticSource) Drain(ctx context.Context, name string) error {
	return s.report("drain node "+name, name, func(sink cluster.NodeSink, _ cluster.Node) { sink.NodeDraining(name) })
}

// Kill implements cluster.NodeSource: the node dies as a failed host does.
func (s *staticSource) Kill(ctx context.Context, name string) error {
	return s.report("kill node "+name, name, func(sink cluster.NodeSink, _ cluster.Node) { sink.NodeLost(name, nil) })
}

// Restore implements cluster.NodeSource: a dead node comes back, empty.
func (s *staticSource) Restore(ctx context.Context, name string) error {
	return s.report("restart node "+name, name, func(sink cluster.NodeSink, n cluster.Node) { sink.NodeAdded(n) })
}

func (s *staticSource) report(op, name string, f func(cluster.NodeSink, cluster.Node)) error {
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
