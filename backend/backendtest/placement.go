package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

func (s *suite) testPlacementGroups(t *testing.T) {
	t.Run("ReadyAndBundles", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{
			Name: "pg", Strategy: ray.Pack,
			Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}, Env: map[string]string{"WHO": "zero"}}, {Resources: ray.Resources{ray.CPU: 1}, Env: map[string]string{"WHO": "one"}}},
		})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		is.Equal(pg.NumBundles(), 2)
		for i, want := range []string{"zero", "one"} {
			w, err := whereAmI.Remote(ctx, c, "WHO", ray.InBundle(pg, i)).Get(ctx)
			is.NoErr(err)
			is.Equal(w.Bundle, i)
			is.Equal(w.Env, want)
		}
		h := counterClass.Remote(ctx, c, 0, ray.InBundle(pg, 1))
		w, err := counterWhere.Remote(ctx, h, "WHO").Get(ctx)
		is.NoErr(err)
		is.Equal(w.Bundle, 1)
		is.Equal(w.Env, "one")
		is.NoErr(pg.Remove(ctx))
		is.NoErr(pg.Remove(ctx)) // idempotent
		_, err = add1.Remote(ctx, c, 1, ray.InBundle(pg, 0)).Get(ctx)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		_, err = counterAdd.Remote(ctx, h, 1).Get(ctx) // actors in it were killed
		is.Equal(ray.CodeOf(err), ray.ActorDied)
	})
	t.Run("BadBundleIndex", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		defer pg.Remove(ctx)
		_, err = add1.Remote(ctx, c, 1, ray.InBundle(pg, 3)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("RemoveRunning", func(t *testing.T) {
		s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		name, g := newGate(1)
		defer g.release()
		running := block.Remote(ctx, c, name, ray.InBundle(pg, 0))
		s.waitChan(t, g.arrivedCh, "task in bundle")
		is.NoErr(pg.Remove(ctx))
		_, err = running.Get(ctx)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		s.waitChan(t, g.cancelCh, "the running task's context to be cancelled")
	})
	t.Run("Strategies", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		for _, tc := range []struct {
			strategy ray.Strategy
			bundles  int
			cpu      float64
			distinct int // -1: don't care
			feasible bool
		}{
			{ray.StrictPack, 3, 1, 1, true},
			{ray.StrictPack, 2, 3, -1, false}, // 6 CPUs on one 4-CPU node
			{ray.StrictSpread, 3, 1, 3, true},
			{ray.StrictSpread, 4, 1, -1, false}, // only 3 nodes
			{ray.Pack, 3, 1, 1, true},
			{ray.Pack, 3, 3, 3, true}, // cannot share a node
			{ray.Spread, 3, 1, 3, true},
			{ray.Spread, 6, 1, 3, true},
		} {
			t.Run(fmt.Sprintf("%s-%dx%v", tc.strategy, tc.bundles, tc.cpu), func(t *testing.T) {
				is := is.New(t)
				c, ctx := s.cluster(t, nil), s.ctxT(t)
				bundles := make([]ray.Bundle, tc.bundles)
				for i := range bundles {
					bundles[i] = ray.Bundle{Resources: ray.Resources{ray.CPU: tc.cpu}}
				}
				pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: tc.strategy, Bundles: bundles})
				if !tc.feasible {
					is.Equal(ray.CodeOf(err), ray.Infeasible)
					is.True(strings.Contains(err.Error(), tc.strategy.String()))
					return
				}
				is.NoErr(err)
				is.NoErr(pg.Ready(ctx))
				nodes := map[string]bool{}
				for i := range tc.bundles {
					w, err := whereAmI.Remote(ctx, c, "", ray.InBundle(pg, i), ray.Resources{ray.CPU: tc.cpu}).Get(ctx)
					is.NoErr(err)
					nodes[w.Node] = true
				}
				if tc.distinct >= 0 {
					is.Equal(len(nodes), tc.distinct)
				}
				is.NoErr(pg.Remove(ctx))
			})
		}
	})
	t.Run("GangIsAtomic", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Snapshot, "ResourceAccounting and Snapshot")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		// Fill node-0 and node-1 with a group, so a STRICT_SPREAD group of
		// three 2-CPU bundles cannot place: it must take nothing.
		hog, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 3}, LabelSelector: ray.NodeSelector{"zone": "a"}},
			{Resources: ray.Resources{ray.CPU: 3}, LabelSelector: ray.NodeSelector{"zone": "b"}},
		}})
		is.NoErr(err)
		is.NoErr(hog.Ready(ctx))
		gang, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 2}}, {Resources: ray.Resources{ray.CPU: 2}}, {Resources: ray.Resources{ray.CPU: 2}},
		}})
		is.NoErr(err)
		is.Equal(gang.Ready(timeout(t, ctx, 30*time.Millisecond)), context.DeadlineExceeded)
		st, err := c.Snapshot(ctx)
		is.NoErr(err)
		for _, n := range st.Nodes {
			if n.Name == "node-2" {
				is.Equal(n.Free[ray.CPU], 4.0) // nothing partially reserved
			}
		}
		is.NoErr(hog.Remove(ctx))
		is.NoErr(gang.Ready(ctx))
		is.NoErr(gang.Remove(ctx))
	})
	t.Run("InfeasibleBundle", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting, "ResourceAccounting")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 64}}}})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(errors.Is(err, ray.ErrInfeasible))
		is.True(strings.Contains(err.Error(), "bundle 1"))
		_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}, LabelSelector: ray.NodeSelector{"zone": "mars"}}}})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
	})
}
