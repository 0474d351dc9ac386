package ray_test

import (
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// wrapper hides a backend the way a test double or a decorator would, and
// exposes it through As.
type wrapper struct{ backend.Backend }

func (w wrapper) As(target any) bool {
	if p, ok := target.(**local.Backend); ok {
		lb, ok := w.Backend.(*local.Backend)
		*p = lb
		return ok
	}
	return false
}

func TestAs(t *testing.T) {
	t.Run("concrete backend and capabilities", func(t *testing.T) {
		is := is.New(t)
		c := localCluster(t, []local.NodeSpec{{Name: "a", Resources: ray.Resources{ray.CPU: 1}}})
		lb, ok := ray.As[*local.Backend](c)
		is.True(ok)
		is.True(lb != nil)
		_, ok = ray.As[ray.FaultInjector](c)
		is.True(ok)
		_, ok = ray.As[*fake.Backend](c)
		is.True(!ok) // not the fake
	})
	t.Run("a wrapper exposes what it wraps", func(t *testing.T) {
		is := is.New(t)
		lb, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "a", Resources: ray.Resources{ray.CPU: 1}}}}, nil)
		is.NoErr(err)
		c, err := ray.NewCluster(t.Context(), wrapper{lb}, nil)
		is.NoErr(err)
		defer c.Close()
		got, ok := ray.As[*local.Backend](c)
		is.True(ok)
		is.Equal(got, lb)
		_, ok = ray.As[ray.FaultInjector](c) // the wrapper does not expose it
		is.True(!ok)
	})
	t.Run("nil cluster", func(t *testing.T) {
		is := is.New(t)
		_, ok := ray.As[*local.Backend](nil)
		is.True(!ok)
	})
}
