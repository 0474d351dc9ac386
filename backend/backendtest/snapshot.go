package backendtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// testSnapshot checks what every backend with the Snapshot capability
// reports, whatever its scheduler: live nodes, the actors with the node
// each runs on, the placement groups with the node of each bundle, the
// recent failures, and (with ResourceAccounting and Concurrent) the tasks
// queued and running per name.
func (s *suite) testSnapshot(t *testing.T) {
	s.need(t, s.h.Capabilities.Snapshot, "Snapshot")
	t.Run("ActorsAndGroups", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 0, ray.Name("snap-counter"))
		is.NoErr(h.Ready(ctx))
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Name: "snap-group", Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 1}},
		}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))

		st, err := c.Snapshot(ctx)
		is.NoErr(err)
		var nodes []string
		for _, n := range st.Nodes {
			is.True(n.Alive)
			nodes = append(nodes, n.Name)
		}
		is.True(len(nodes) > 0)
		ai := slices.IndexFunc(st.Actors, func(a ray.ActorState) bool { return a.Name == "snap-counter" })
		is.True(ai >= 0) // the named actor is listed
		a := st.Actors[ai]
		is.Equal(a.ID, h.ID())
		is.Equal(a.State, "ALIVE")
		is.True(slices.Contains(nodes, a.Node))
		gi := slices.IndexFunc(st.PlacementGroups, func(g ray.PlacementGroupState) bool { return g.ID == pg.ID() })
		is.True(gi >= 0) // the group is listed
		g := st.PlacementGroups[gi]
		is.Equal(g.Name, "snap-group")
		is.Equal(g.State, "CREATED")
		is.Equal(len(g.Nodes), 2)
		for _, n := range g.Nodes {
			is.True(slices.Contains(nodes, n))
		}

		is.NoErr(h.Kill(ctx))
		is.NoErr(pg.Remove(ctx))
		st, err = c.Snapshot(ctx)
		is.NoErr(err)
		for _, a := range st.Actors {
			if a.ID == h.ID() {
				is.Equal(a.State, "DEAD")
			}
		}
		for _, g := range st.PlacementGroups {
			if g.ID == pg.ID() {
				is.Equal(g.State, "REMOVED")
			}
		}
	})
	t.Run("RecentFailures", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := fail.Remote(ctx, c, "snap-broken-input", ray.Name("snap-failing")).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		_, err = add1.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err) // a success adds nothing

		st, err := c.Snapshot(ctx)
		is.NoErr(err)
		is.True(len(st.Failures) <= backend.RecentFailures)
		i := slices.IndexFunc(st.Failures, func(f backend.TaskFailure) bool { return f.Task == "snap-failing" })
		is.True(i >= 0) // the failed attempt is listed under its display name
		f := st.Failures[i]
		is.Equal(f.Attempt, 0)
		is.Equal(f.Code, backend.TaskFailed)
		is.True(strings.Contains(f.Message, "snap-broken-input")) // the task's own error text
		is.True(f.Node != "")                                     // where it ran
		is.True(!f.Time.IsZero())
		for _, f := range st.Failures {
			is.True(f.Task != "backendtest.add1") // only failures are listed
		}

		h := counterClass.Remote(ctx, c, 1)
		_, err = counterPanic.Remote(ctx, h, "snap-method-boom").Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		st, err = c.Snapshot(ctx)
		is.NoErr(err)
		last := st.Failures[len(st.Failures)-1]          // the newest is last
		is.Equal(last.Task, "backendtest.counter.panic") // an actor call is listed as Class.Method
		is.Equal(last.Code, backend.TaskFailed)
		is.True(strings.Contains(last.Message, "snap-method-boom"))
	})
	t.Run("TasksPerName", func(t *testing.T) {
		s.need(t, s.h.Capabilities.ResourceAccounting && s.h.Capabilities.Concurrent, "ResourceAccounting and Concurrent")
		is := is.New(t)
		c, ctx := s.cluster(t, []Node{{Name: "solo", Resources: backend.Resources{ray.CPU: 2}}}), s.ctxT(t)
		name, g := newGate(2)
		var refs []ray.ObjectRef[string]
		for range 3 {
			refs = append(refs, block.Remote(ctx, c, name, ray.Name("snap-blocked")))
		}
		refs = append(refs, block.Remote(ctx, c, name))
		s.waitChan(t, g.arrivedCh, "two tasks to start")

		st, err := c.Snapshot(ctx)
		is.NoErr(err)
		counts := map[string][2]int{} // name → queued, running
		for _, ts := range st.Tasks {
			counts[ts.Name] = [2]int{ts.Queued, ts.Running}
		}
		got := counts["snap-blocked"]
		is.Equal(got[0]+got[1], 3)                         // every snap-blocked task queued or running
		is.Equal(got[1]+counts["backendtest.block"][1], 2) // two run: only two fit
		is.Equal(got[0]+counts["backendtest.block"][0], 2) // the others wait
		is.True(slices.IsSortedFunc(st.Tasks, func(a, b backend.TaskSummary) int { return strings.Compare(a.Name, b.Name) }))
		g.release()
		_, err = ray.GetAll(ctx, refs)
		is.NoErr(err)
	})
}
