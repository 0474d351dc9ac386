package clustertest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// patience bounds each wait of the conformance tests.
const patience = 10 * time.Second

// SourceHarness makes the node source under test for [TestSource].
type SourceHarness struct {
	// New returns a fresh source and the nodes it must report (compared
	// by name, resources and TPU host). Each subtest calls it once; the
	// source is not running yet.
	New func(t *testing.T) (source cluster.NodeSource, want []cluster.Node)
	// Faults says the source implements Kill, Restore and Drain; without
	// it they must fail with Unimplemented.
	Faults bool
}

// TestSource checks a [cluster.NodeSource] against the contracts of the
// runtime's seams: Run reports every node (and a Syncer's Synced returns
// only after that), then returns once its context ends; TPU hosts make
// whole slices (cluster.CheckSlices); Kill, Restore and Drain report to
// the sink before they return, and name an unknown node NotFound.
func TestSource(t *testing.T, h SourceHarness) {
	t.Run("RunReportsEveryNode", func(t *testing.T) {
		src, want := h.New(t)
		sink, stop := run(t, src)
		defer stop()
		got := sink.waitAdded(t, len(want))
		byName := map[string]cluster.Node{}
		for _, n := range got {
			byName[n.Name] = n
		}
		if len(byName) != len(want) {
			t.Fatalf("Run reported %d distinct nodes, want %d: %v", len(byName), len(want), names(got))
		}
		for _, w := range want {
			g, ok := byName[w.Name]
			switch {
			case !ok:
				t.Errorf("Run did not report node %q", w.Name)
			case !maps.Equal(g.Resources, w.Resources):
				t.Errorf("node %q: resources %v, want %v", w.Name, g.Resources, w.Resources)
			case (g.TPU == nil) != (w.TPU == nil) || (g.TPU != nil && *g.TPU != *w.TPU):
				t.Errorf("node %q: TPU host %v, want %v", w.Name, g.TPU, w.TPU)
			}
		}
		if err := cluster.CheckSlices("check the source's slices", got); err != nil {
			t.Errorf("the source's TPU hosts do not make whole slices: %v", err)
		}
	})
	t.Run("RunReturnsWhenCanceled", func(t *testing.T) {
		src, want := h.New(t)
		sink, stop := run(t, src)
		sink.waitAdded(t, len(want))
		stop() // fails the test if Run does not return
	})
	t.Run("Faults", func(t *testing.T) {
		src, want := h.New(t)
		if len(want) == 0 {
			t.Skip("the source has no nodes")
		}
		sink, stop := run(t, src)
		defer stop()
		sink.waitAdded(t, len(want))
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		name := want[0].Name
		if !h.Faults {
			for op, f := range map[string]func(context.Context, string) error{"Kill": src.Kill, "Restore": src.Restore, "Drain": src.Drain} {
				if err := f(ctx, name); backend.CodeOf(err) != backend.Unimplemented {
					t.Errorf("%s without faults: got %v, want an Unimplemented error", op, err)
				}
			}
			return
		}
		if err := src.Kill(ctx, name); err != nil {
			t.Fatalf("Kill(%q): %v", name, err)
		}
		if !sink.has("lost " + name) {
			t.Errorf("Kill(%q) returned before the sink heard NodeLost (reports: %v)", name, sink.events())
		}
		if err := src.Restore(ctx, name); err != nil {
			t.Fatalf("Restore(%q): %v", name, err)
		}
		if n := sink.count("added " + name); n != 2 {
			t.Errorf("Restore(%q) returned with %d NodeAdded reports of it, want 2 (reports: %v)", name, n, sink.events())
		}
		if err := src.Drain(ctx, name); err != nil {
			t.Fatalf("Drain(%q): %v", name, err)
		}
		if !sink.has("draining " + name) {
			t.Errorf("Drain(%q) returned before the sink heard NodeDraining", name)
		}
		for op, f := range map[string]func(context.Context, string) error{"Kill": src.Kill, "Restore": src.Restore, "Drain": src.Drain} {
			if err := f(ctx, "no-such-node"); backend.CodeOf(err) != backend.NotFound {
				t.Errorf("%s of an unknown node: got %v, want a NotFound error", op, err)
			}
		}
	})
}

// TestRunner checks a [cluster.Runner]: Start returns an executor that
// runs a task on a node brought up with NodeUp and returns its result,
// NodeDown does not block, and Close returns once everything has stopped.
// newRunner returns a fresh runner; node is a node it can run work on.
func TestRunner(t *testing.T, newRunner func(t *testing.T) (r cluster.Runner, node cluster.Node)) {
	t.Run("RunsTaskOnNode", func(t *testing.T) {
		r, node := newRunner(t)
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		exec, err := r.Start(ctx, echo{}, func(string, error) {})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := r.NodeUp(ctx, node); err != nil {
			t.Fatalf("NodeUp(%q): %v", node.Name, err)
		}
		in := backend.Value{Data: []byte("ping")}
		out, err := exec.RunTask(ctx, echoTask, in, &backend.RuntimeInfo{Task: echoTask, Node: node.Name})
		if err != nil {
			t.Fatalf("RunTask on %q: %v", node.Name, err)
		}
		if string(out.Data) != "ping" {
			t.Errorf("RunTask returned %q, want the executor's %q", out.Data, "ping")
		}
		done := make(chan struct{})
		go func() { r.NodeDown(node.Name); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("NodeDown blocked")
		}
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

const echoTask = "clustertest.echo"

// echo is the executor TestRunner starts runners with: its one task
// returns its input.
type echo struct{}

func (echo) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if name != echoTask {
		return backend.Value{}, backend.Errorf(backend.NotFound, "run task "+name, "not registered")
	}
	return arg, nil
}

func (echo) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return nil, backend.Errorf(backend.NotFound, "create actor "+class, "not registered")
}

func (echo) HasTask(name string) bool            { return name == echoTask }
func (echo) HasActorMethod(class, m string) bool { return false }

// recorder is a NodeSink that records every report.
type recorder struct {
	mu      sync.Mutex
	changed chan struct{}
	log     []string
	added   []cluster.Node
}

func (r *recorder) note(e string) {
	r.log = append(r.log, e)
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) NodeAdded(n cluster.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = append(r.added, n)
	r.note("added " + n.Name)
}

func (r *recorder) NodeDraining(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("draining " + name)
}

func (r *recorder) NodeLost(name string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note("lost " + name)
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recorder) has(e string) bool { return r.count(e) > 0 }

func (r *recorder) count(e string) int {
	n := 0
	for _, x := range r.events() {
		if x == e {
			n++
		}
	}
	return n
}

// waitAdded waits until n nodes were added and returns them.
func (r *recorder) waitAdded(t *testing.T, n int) []cluster.Node {
	t.Helper()
	deadline := time.After(patience)
	for {
		r.mu.Lock()
		got := slices.Clone(r.added)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("Run reported %d of %d nodes within %s: %v", len(got), n, patience, names(got))
		}
	}
}

// run starts src.Run on a recorder (waiting for Synced when src is a
// Syncer); stop cancels it and fails the test unless Run returns.
func run(t *testing.T, src cluster.NodeSource) (*recorder, func()) {
	t.Helper()
	sink := &recorder{changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	if s, ok := src.(cluster.Syncer); ok {
		sctx, scancel := context.WithTimeout(ctx, patience)
		err := s.Synced(sctx)
		scancel()
		if err != nil {
			cancel()
			t.Fatalf("Synced: %v", err)
		}
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && ctx.Err() == nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(patience):
				t.Errorf("Run did not return within %s of its context's end", patience)
			}
		})
	}
	return sink, stop
}

func names(ns []cluster.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}
