package cluster

import (
	"context"
	"errors"
	"sync"

	"github.com/goray-dev/goray/backend"
)

// StaticSource is a [NodeSource] and [Syncer] over a fixed list of nodes:
// Run reports them all, then they change only by fault injection (Kill,
// Restore, Drain; the runtime's KillNode, RestartNode and PreemptSlice
// call them). Add is Unimplemented. backend/local is built on it, and so
// can be a backend over a fixed list of TPU VMs (docs/backends.md).
// Create it with [NewStaticSource]; the zero value has no nodes. It is
// safe for concurrent use.
type StaticSource struct {
	nodes  []Node
	byName map[string]int32 // index in nodes
	once   sync.Once
	synced chan struct{} // closed once Run has reported every node

	mu   sync.Mutex // orders reports; guards sink
	sink NodeSink
}

var (
	_ NodeSource = (*StaticSource)(nil)
	_ Syncer     = (*StaticSource)(nil)
)

// NewStaticSource returns a source of nodes (which it keeps; do not modify
// them afterwards). Check TPU hosts with [CheckSlices] first, so a
// bad list fails when it is read rather than as hosts left out of the
// slice index.
func NewStaticSource(nodes []Node) *StaticSource {
	s := &StaticSource{nodes: nodes, byName: make(map[string]int32, len(nodes))}
	for i, n := range nodes {
		s.byName[n.Name] = int32(i)
	}
	return s
}

func (s *StaticSource) syncedCh() chan struct{} {
	s.once.Do(func() { s.synced = make(chan struct{}) })
	return s.synced
}

// Nodes returns the source's nodes.
func (s *StaticSource) Nodes() []Node { return s.nodes }

// Run implements [NodeSource]: it reports every node, then waits for
// ctx to end.
func (s *StaticSource) Run(ctx context.Context, sink NodeSink) error {
	s.mu.Lock()
	s.sink = sink
	kept, _ := sink.(keptNodeSink)
	for _, n := range s.nodes {
		if kept != nil {
			kept.nodeAddedKept(n) // the runtime keeps n's maps, not copies
		} else {
			sink.NodeAdded(n)
		}
	}
	close(s.syncedCh())
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.sink = nil
	s.mu.Unlock()
	return nil
}

// Synced implements Syncer: it returns once Run has reported
// every node.
func (s *StaticSource) Synced(ctx context.Context) error {
	select {
	case <-s.syncedCh():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Add implements NodeSource: a static source does not grow.
func (s *StaticSource) Add(ctx context.Context, n Node) error {
	return backend.Errorf(backend.Unimplemented, "add node "+n.Name, "a static source's nodes are fixed when it is made")
}

// Drain implements NodeSource.
func (s *StaticSource) Drain(ctx context.Context, name string) error {
	return s.report("drain node "+name, name, func(sink NodeSink, _ Node) { sink.NodeDraining(name) })
}

// Kill implements NodeSource: the node dies as a failed host does.
func (s *StaticSource) Kill(ctx context.Context, name string) error {
	return s.report("kill node "+name, name, func(sink NodeSink, _ Node) {
		sink.NodeLost(name, errors.New("node "+name+" was killed"))
	})
}

// Restore implements NodeSource: a dead node comes back, empty.
func (s *StaticSource) Restore(ctx context.Context, name string) error {
	return s.report("restart node "+name, name, func(sink NodeSink, n Node) { sink.NodeAdded(n) })
}

func (s *StaticSource) report(op, name string, f func(NodeSink, Node)) error {
	i, ok := s.byName[name]
	if !ok {
		return backend.Errorf(backend.NotFound, op, "no node named %q", name)
	}
	n := s.nodes[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sink == nil {
		return backend.Errorf(backend.FailedPrecondition, op, "the source is not running (backend not started, or closed)")
	}
	f(s.sink, n)
	return nil
}
