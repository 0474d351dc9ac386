package ray

import (
	"context"
	"reflect"
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
