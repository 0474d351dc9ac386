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
