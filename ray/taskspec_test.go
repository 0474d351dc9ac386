package ray

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
)

var specDouble = NewTask("raytest.spec-double", func(ctx context.Context, x int) (int, error) { return 2 * x, nil })

// TestSharedTaskSpec: submissions without options share the task's one
// spec through backend.ArgSubmitter, each with its own input (values and
// refs); the backend leaves the spec as it was; submissions with options
// get their own spec with the options applied.
func TestSharedTaskSpec(t *testing.T) {
	is := is.New(t)
	be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	is.NoErr(err)
	c, err := NewCluster(context.Background(), be, nil)
	is.NoErr(err)
	defer c.Close()
	is.True(c.argSub != nil) // local takes the input beside the spec
	ctx := context.Background()
	want := *defaultTaskSpec(specDouble.Name())
	var refs []ObjectRef[int]
	for i := range 50 {
		refs = append(refs, specDouble.Remote(ctx, c, i))
	}
	chained := specDouble.RemoteRef(ctx, c, refs[3])
	for i, r := range refs {
		v, err := r.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 2*i)
	}
	v, err := chained.Get(ctx)
	is.NoErr(err)
	is.Equal(v, 12)
	is.True(reflect.DeepEqual(*specDouble.spec, want)) // unchanged by the backend
	_, err = specDouble.Remote(ctx, c, 1, Resources{CPU: 8}).Get(ctx)
	is.Equal(backend.CodeOf(err), backend.Infeasible) // the option applied
	v, err = specDouble.Remote(ctx, c, 5, Resources{CPU: 2}).Get(ctx)
	is.NoErr(err)
	is.Equal(v, 10)
	is.True(reflect.DeepEqual(*specDouble.spec, want))
}

// TestPlacementGroupErrorsAfterLazyNames: the errors whose text is now made
// only when needed read as before: a bundle's resource problem names the
// bundle, and work pinned to a removed group fails with
// ErrPlacementGroupRemoved naming the group.
func TestPlacementGroupErrorsAfterLazyNames(t *testing.T) {
	is := is.New(t)
	be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	is.NoErr(err)
	c, err := NewCluster(context.Background(), be, nil)
	is.NoErr(err)
	defer c.Close()
	ctx := context.Background()
	_, err = NewPlacementGroup(ctx, c, PlacementGroupSpec{Bundles: []Bundle{{Resources: Resources{CPU: 1}}, {Resources: Resources{"GPU": 1}}}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "create placement group: bundle 1: no node has resource \"GPU\"")) // names the bundle
	_, err = NewPlacementGroup(ctx, c, PlacementGroupSpec{Bundles: []Bundle{{Resources: Resources{CPU: 1}}, {Resources: Resources{CPU: 0}}}})
	is.Equal(backend.CodeOf(err), backend.InvalidArgument)
	is.True(strings.Contains(err.Error(), "bundle 1: empty bundle")) // names the bundle
	pg, err := NewPlacementGroup(ctx, c, PlacementGroupSpec{Bundles: []Bundle{{Resources: Resources{CPU: 1}}}})
	is.NoErr(err)
	is.NoErr(pg.Ready(ctx))
	is.NoErr(pg.Remove(ctx))
	_, err = specDouble.Remote(ctx, c, 1, InBundle(pg, 0)).Get(ctx)
	is.True(errors.Is(err, ErrPlacementGroupRemoved))
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	is.True(strings.Contains(err.Error(), pg.ID().String()))
	is.NoErr(pg.Remove(ctx)) // idempotent
}

type specCounter struct{ n int }

var (
	specCounterClass = NewActorClass("raytest.spec-counter", func(ctx context.Context, n int) (*specCounter, error) { return &specCounter{n: n}, nil })
	specCounterAdd   = NewMethod(specCounterClass, "add", func(ctx context.Context, c *specCounter, d int) (int, error) { c.n += d; return c.n, nil })
	specCounterName  = NewMethod(specCounterClass, "name", func(ctx context.Context, c *specCounter, _ struct{}) (string, error) {
		info, _ := Runtime(ctx)
		return info.TaskName(), nil
	})
)

// TestSharedCallSpec: calls of one method through one handle share a spec
// through backend.CallArgSubmitter, each with its own input (values and
// refs), in order; a call of another method gets its own spec, and the
// backend leaves the specs as they were. The calls' runtime info names
// the method called, across switches between methods.
func TestSharedCallSpec(t *testing.T) {
	is := is.New(t)
	be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	is.NoErr(err)
	c, err := NewCluster(context.Background(), be, nil)
	is.NoErr(err)
	defer c.Close()
	is.True(c.callSub != nil) // local takes the input beside the spec
	ctx := context.Background()
	h := specCounterClass.Remote(ctx, c, 100)
	var refs []ObjectRef[int]
	for i := 1; i <= 20; i++ {
		refs = append(refs, specCounterAdd.Remote(ctx, h, i))
	}
	addSpec := h.calls.last.Load()
	is.True(addSpec != nil && addSpec.Method == "add")
	want := *addSpec
	chained := specCounterAdd.RemoteRef(ctx, h, Put(ctx, c, 1000))
	is.True(h.calls.last.Load() == addSpec) // shared by the ref call too
	sum := 100
	for i, r := range refs {
		sum += i + 1
		v, err := r.Get(ctx)
		is.NoErr(err)
		is.Equal(v, sum)
	}
	v, err := chained.Get(ctx)
	is.NoErr(err)
	is.Equal(v, sum+1000)
	is.True(reflect.DeepEqual(*addSpec, want)) // unchanged by the backend
	for range 3 {
		name, err := specCounterName.Remote(ctx, h, struct{}{}).Get(ctx)
		is.NoErr(err)
		is.Equal(name, "raytest.spec-counter.name")
		is.True(h.calls.last.Load() != addSpec) // its own spec
		v, err = specCounterAdd.Remote(ctx, h, 1).Get(ctx)
		is.NoErr(err)
		sum++
		is.Equal(v, sum+1000)
	}
}
