package fake_test

import (
	"context"
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

func TestPlacementGroups(t *testing.T) {
	ctx := context.Background()
	twoHosts := ray.PlacementGroupSpec{Name: "slice", Strategy: ray.StrictSpread, Bundles: []ray.Bundle{
		{Resources: ray.Resources{ray.CPU: 1, ray.TPU: 4}, Env: map[string]string{"TPU_WORKER_ID": "0"}},
		{Resources: ray.Resources{ray.CPU: 1, ray.TPU: 4}, Env: map[string]string{"TPU_WORKER_ID": "1"}},
	}}

	t.Run("placed at once; work runs in its bundle", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, &fake.Options{Env: map[string]string{"REGION": "test"}}, nil)
		pg, err := ray.NewPlacementGroup(ctx, c, twoHosts)
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		v, err := whereTask.Remote(ctx, c, 0, ray.InBundle(pg, 1), ray.Resources{ray.TPU: 4}).Get(ctx)
		is.NoErr(err)
		is.Equal(v, view{Task: "faketest.where", Node: fake.NodeName, Group: uint64(pg.ID()), Bundle: 1,
			Env: map[string]string{"REGION": "test", "TPU_WORKER_ID": "1"}})
		v, err = whereTask.Remote(ctx, c, 0, ray.InBundle(pg, -1)).Get(ctx)
		is.NoErr(err)
		is.Equal(v.Bundle, 0) // the first bundle that fits
		calls := b.CallsTo("faketest.where")
		is.Equal(calls[0].Group, pg.ID())
		is.Equal(calls[0].Bundle, 1)
		pgCalls := b.CallsTo("slice")
		is.Equal(names(pgCalls), []string{"placementGroup slice", "placementGroupReady slice"})
		is.Equal(pgCalls[0].GroupSpec.Strategy, ray.StrictSpread)
	})

	t.Run("bad specs", func(t *testing.T) {
		_, c := newCluster(t, nil, nil)
		cases := []struct {
			name string
			spec ray.PlacementGroupSpec
		}{
			{"bad strategy", ray.PlacementGroupSpec{Strategy: 7, Bundles: twoHosts.Bundles}},
			{"no bundles", ray.PlacementGroupSpec{}},
			{"negative resource", ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.TPU: -1}}}}},
			{"empty bundle", ray.PlacementGroupSpec{Bundles: []ray.Bundle{{}}}},
			{"bad selector", ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}, LabelSelector: ray.NodeSelector{"a": "!"}}}}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				is := is.New(t)
				_, err := ray.NewPlacementGroup(ctx, c, tc.spec)
				is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			})
		}
	})

	t.Run("work that does not fit its bundle", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, nil, nil)
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.TPU: 4}}}})
		is.NoErr(err)
		err = square.Remote(ctx, c, 1, ray.InBundle(pg, 1)).Err()
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // no bundle 1
		err = square.Remote(ctx, c, 1, ray.InBundle(pg, 0)).Err()
		is.Equal(ray.CodeOf(err), ray.Infeasible) // default CPU: 1, and the bundle has no CPU
		err = square.Remote(ctx, c, 1, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0, ray.TPU: 8}).Err()
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		err = square.Remote(ctx, c, 1, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0, ray.TPU: 4}).Err()
		is.NoErr(err)
		// no accounting: the bundle holds the same work twice
		is.NoErr(counterClass.Remote(ctx, c, 0, ray.InBundle(pg, 0), ray.Resources{ray.TPU: 4}).Ready(ctx))
		is.NoErr(counterClass.Remote(ctx, c, 0, ray.InBundle(pg, 0), ray.Resources{ray.TPU: 4}).Ready(ctx))
	})

	t.Run("remove", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, nil, nil)
		pg, err := ray.NewPlacementGroup(ctx, c, twoHosts)
		is.NoErr(err)
		h := counterClass.Remote(ctx, c, 0, ray.InBundle(pg, 0), ray.Resources{ray.TPU: 4})
		is.NoErr(h.Ready(ctx))
		done := make(chan error)
		go func() {
			_, err := block.Remote(ctx, c, 0, ray.InBundle(pg, 1)).Get(ctx)
			done <- err
		}()
		<-started
		is.NoErr(pg.Remove(ctx)) // cancels the running task
		err = <-done
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		is.NoErr(pg.Remove(ctx)) // idempotent
		err = pg.Ready(ctx)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		_, err = incr.Remote(ctx, h, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.ActorDied) // actors in the group died with it
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))
		err = square.Remote(ctx, c, 1, ray.InBundle(pg, 0)).Err()
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
		is.True(errors.Is(err, ray.ErrPlacementGroupRemoved))

		s, err := b.Snapshot(ctx)
		is.NoErr(err)
		is.Equal(s.PlacementGroups, []backend.PlacementGroupState{{ID: pg.ID(), Name: "slice", Strategy: ray.StrictSpread, State: "REMOVED", Nodes: []string{"", ""}}})
		is.Equal(s.Actors[0].State, "DEAD")
	})

	t.Run("snapshot", func(t *testing.T) {
		is := is.New(t)
		b, c := newCluster(t, &fake.Options{NodeLabels: map[string]string{"pool": "v6e"}}, nil)
		pg, err := ray.NewPlacementGroup(ctx, c, twoHosts)
		is.NoErr(err)
		h := counterClass.Remote(ctx, c, 0, ray.Name("a"))
		s, err := b.Snapshot(ctx)
		is.NoErr(err)
		is.Equal(*s, backend.State{
			Nodes:           []backend.NodeState{{Name: fake.NodeName, Labels: map[string]string{"pool": "v6e"}, Alive: true}},
			PlacementGroups: []backend.PlacementGroupState{{ID: pg.ID(), Name: "slice", Strategy: ray.StrictSpread, State: "CREATED", Nodes: []string{fake.NodeName, fake.NodeName}}},
			Actors:          []backend.ActorState{{ID: h.ID(), Class: "faketest.counter", Name: "a", Node: fake.NodeName, State: "ALIVE"}},
		})
	})
}
