package ray_test

import (
	"context"
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var sq = ray.NewTask("smoke.square", func(ctx context.Context, x int) (int, error) { return x * x, nil })

type counter struct{ n int }

var counterClass = ray.NewActorClass("smoke.counter", func(ctx context.Context, start int) (*counter, error) { return &counter{start}, nil })
var incr = ray.NewMethod(counterClass, "incr", func(ctx context.Context, c *counter, d int) (int, error) { c.n += d; return c.n, nil })

func TestSmoke(t *testing.T) {
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Count: 2, Resources: backend.Resources{"CPU": 2}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var refs []ray.ObjectRef[int]
	for i := range 10 {
		refs = append(refs, sq.Remote(ctx, c, i))
	}
	vals, err := ray.GetAll(ctx, refs)
	t.Log(vals, err)
	r2 := sq.RemoteRef(ctx, c, sq.Remote(ctx, c, 3))
	t.Log(r2.Get(ctx))
	h := counterClass.Remote(ctx, c, 10)
	var crefs []ray.ObjectRef[int]
	for range 5 {
		crefs = append(crefs, incr.Remote(ctx, h, 1))
	}
	t.Log(ray.GetAll(ctx, crefs))
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{{Resources: ray.Resources{"CPU": 1}}, {Resources: ray.Resources{"CPU": 1}}}})
	t.Log(err)
	t.Log(pg.Ready(ctx))
	t.Log(sq.Remote(ctx, c, 4, ray.InBundle(pg, 1)).Get(ctx))
	_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictSpread, Bundles: []ray.Bundle{{Resources: ray.Resources{"CPU": 1}}, {Resources: ray.Resources{"CPU": 1}}, {Resources: ray.Resources{"CPU": 1}}}})
	t.Log(err)
	t.Log(sq.Remote(ctx, c, 4, ray.Resources{"CPU": 3}).Get(ctx))
	t.Log(sq.Remote(ctx, c, 4, ray.Resources{"GPU": 3}).Get(ctx))
	t.Log(pg.Remove(ctx))
	s, _ := c.Snapshot(ctx)
	t.Logf("%+v", s)
}
