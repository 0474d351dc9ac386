package backendtest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

func (s *suite) testScheduling(t *testing.T) {
	t.Run("QueueBeyondCapacity", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 2}}}), s.ctxT(t)
		name, g := newGate(2)
		var refs []ray.ObjectRef[string]
		for range 4 {
			refs = append(refs, block.Remote(ctx, c, name))
		}
		s.waitChan(t, g.arrivedCh, "two tasks to start")
		if s.h.Capabilities.Snapshot {
			st, err := c.Snapshot(ctx)
			is.NoErr(err)
			is.Equal(st.Running, 2) // only two fit
			is.Equal(st.Queued, 2)
		}
		g.release()
		vals, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(len(vals), 4)
		is.Equal(g.count(), 4)
	})
	t.Run("Infeasible", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := add1.Remote(ctx, c, 1, ray.Resources{ray.CPU: 5}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "CPU: 5"))
		_, err = add1.Remote(ctx, c, 1, ray.Resources{"unicorn": 1}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "unicorn"))
		h := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 8})
		is.Equal(ray.CodeOf(h.Err()), ray.Infeasible)
	})
	t.Run("CustomResource", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		w, err := whereAmI.Remote(ctx, c, "", ray.Resources{"special": 1}).Get(ctx)
		is.NoErr(err)
		is.Equal(w.Node, "node-2")
	})
	t.Run("NodeSelector", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Labels, "Labels")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		for range 5 {
			w, err := whereAmI.Remote(ctx, c, "", ray.NodeSelector{"zone": "b"}).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Node, "node-1")
			is.Equal(w.Labels["zone"], "b")
			w, err = whereAmI.Remote(ctx, c, "", ray.NodeSelector{"zone": "!in(a,b)"}).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Node, "node-2")
		}
		_, err := add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "mars"}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), "zone=mars"))
	})
	t.Run("DependencyHoldsNoResources", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 1}}}), s.ctxT(t)
		// The input is a put value that a gate-blocked... instead: a
		// dependent waiting on an unfinished task must not hold the only
		// CPU, or its input could never run.
		name, g := newGate(1)
		defer g.release()
		first := block.Remote(ctx, c, name, ray.Resources{ray.CPU: 0})
		waiting := echo.RemoteRef(ctx, c, first)
		other := add1.Remote(ctx, c, 1) // must run while `waiting` waits
		v, err := other.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2)
		g.release()
		s2, err := waiting.Get(ctx)
		is.NoErr(err)
		is.Equal(s2, "opened")
	})
	t.Run("NoStarvation", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 4}}}), s.ctxT(t)
		// A stream of 1-CPU tasks keeps the node busy; a 4-CPU task queued
		// behind them must still run while the stream goes on.
		stop := make(chan struct{})
		streamDone := make(chan struct{})
		go func() {
			defer close(streamDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				refs := make([]ray.ObjectRef[int], 8)
				for i := range refs {
					refs[i] = add1.Remote(ctx, c, i)
				}
				if _, err := ray.GetAll(ctx, refs); err != nil {
					return
				}
			}
		}()
		big := add1.Remote(ctx, c, 100, ray.Resources{ray.CPU: 4})
		v, err := big.Get(ctx)
		close(stop)
		<-streamDone
		is.NoErr(err)
		is.Equal(v, 101)
	})
	t.Run("ZeroResources", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 1}}}), s.ctxT(t)
		name, g := newGate(3)
		var refs []ray.ObjectRef[string]
		for range 3 {
			refs = append(refs, block.Remote(ctx, c, name, ray.Resources{ray.CPU: 0}))
		}
		s.waitChan(t, g.arrivedCh, "three 0-CPU tasks on a 1-CPU node")
		g.release()
		_, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
	})
}

func (s *suite) testFaults(t *testing.T) {
	s.need(t, s.h.Capabilities.FaultInjection && s.h.Capabilities.Concurrent, "FaultInjection and Concurrent")
	kill := func(t *testing.T, c *ray.Cluster, node string) {
		t.Helper()
		fi, ok := c.Backend().(backend.FaultInjector)
		if !ok {
			t.Fatalf("backend %T declares FaultInjection but does not implement backend.FaultInjector", c.Backend())
		}
		if err := fi.KillNode(context.Background(), node); err != nil {
			t.Fatalf("KillNode(%s): %v", node, err)
		}
	}
	t.Run("TaskRetriedOnNodeDeath", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		name, g := newGate(1)
		defer g.release()
		ref := block.Remote(ctx, c, name, ray.NodeSelector{"zone": "in(a,b)"}, ray.Retries(1))
		s.waitChan(t, g.arrivedCh, "task start")
		node := runningNode(t, c)
		kill(t, c, node)
		s.waitChan(t, g.cancelCh, "the lost attempt's context to be cancelled")
		g.release()
		v, err := ref.Get(ctx)
		is.NoErr(err)
		is.Equal(v, "opened")
	})
	t.Run("TaskUnavailableWithoutRetries", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		name, g := newGate(1)
		defer g.release()
		ref := block.Remote(ctx, c, name, ray.NodeSelector{"zone": "c"}, ray.Retries(0))
		s.waitChan(t, g.arrivedCh, "task start")
		kill(t, c, "node-2")
		_, err := ref.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.True(errors.Is(err, ray.ErrUnavailable))
		is.True(strings.Contains(err.Error(), "node-2"))
		// The node is gone: work only it could run is now infeasible.
		_, err = add1.Remote(ctx, c, 1, ray.NodeSelector{"zone": "c"}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
	})
	t.Run("ActorRestarts", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0, ray.MaxRestarts(1))
		w, err := counterWhere.Remote(ctx, h, "").Get(ctx)
		is.NoErr(err)
		kill(t, c, w.Node)
		// The restarted actor starts from its constructor again.
		v, err := counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 1)
		w2, err := counterWhere.Remote(ctx, h, "").Get(ctx)
		is.NoErr(err)
		is.True(w2.Node != w.Node)
		kill(t, c, w2.Node) // out of restarts
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied)
	})
	t.Run("PlacementGroupRescheduled", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		w, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 0)).Get(ctx)
		is.NoErr(err)
		kill(t, c, w.Node)
		is.NoErr(pg.Ready(ctx))
		w2, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 0)).Get(ctx)
		is.NoErr(err)
		is.True(w2.Node != w.Node)
		w3, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, 1)).Get(ctx)
		is.NoErr(err)
		is.True(w3.Node != w2.Node) // still strictly spread
	})
}

// runningNode finds the one node running a task, from a snapshot.
func runningNode(t *testing.T, c *ray.Cluster) string {
	t.Helper()
	st, err := c.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var nodes []string
	for _, n := range st.Nodes {
		if n.Running > 0 {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) != 1 {
		t.Fatalf("want one node running a task, have %v", nodes)
	}
	return nodes[0]
}
