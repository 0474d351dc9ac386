package backendtest

import (
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

// testSnapshot checks what every backend with the Snapshot capability
// reports, whatever its scheduler: live nodes, the actors with the node
// each runs on, and the placement groups with the node of each bundle.
func (s *suite) testSnapshot(t *testing.T) {
	s.need(t, s.h.Capabilities.Snapshot, "Snapshot")
	t.Run("ActorsAndGroups", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), ctxT(t)
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
}
