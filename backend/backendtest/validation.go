package backendtest

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// testValidation checks that bad input is refused with InvalidArgument
// naming what is wrong, wherever it enters, instead of corrupting the
// scheduler or panicking deep inside.
func (s *suite) testValidation(t *testing.T) {
	amounts := []struct {
		name   string
		amount float64
		want   string // in the error
	}{
		{"1e15", 1e15, "at most"},
		{"2PiB", 2 << 50, "at most"},
		{"1e300", 1e300, "at most"},
		{"MaxFloat64", math.MaxFloat64, "at most"},
		{"RoundsToZero", 1e-5, "rounds to 0"},
		{"NegativeZero", math.Copysign(0, -1), "negative zero"},
	}
	for _, a := range amounts {
		t.Run("ResourceAmount/"+a.name, func(t *testing.T) {
			is := is.New(t)
			c, ctx := s.cluster(t, nil), s.ctxT(t)
			res := ray.Resources{ray.CPU: a.amount}
			_, err := echo.Remote(ctx, c, "x", res).Get(ctx)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument) // task
			is.True(strings.Contains(err.Error(), a.want))
			is.True(strings.Contains(err.Error(), "CPU"))
			h := counterClass.Remote(ctx, c, 0, res)
			is.Equal(ray.CodeOf(h.Err()), ray.InvalidArgument) // actor
			is.True(strings.Contains(h.Err().Error(), a.want))
			_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1, "memory": a.amount}}}})
			is.Equal(ray.CodeOf(err), ray.InvalidArgument) // bundle
			is.True(strings.Contains(err.Error(), a.want))
			// The cluster still works and no node was overdrawn.
			v, err := echo.Remote(ctx, c, "ok").Get(ctx)
			is.NoErr(err)
			is.Equal(v, "ok")
		})
	}
	t.Run("TooManyBundles", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		bundles := make([]ray.Bundle, backend.MaxBundles+1)
		for i := range bundles {
			bundles[i] = ray.Bundle{Resources: ray.Resources{ray.CPU: 0.001}}
		}
		_, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: bundles})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "at most 10000"))
	})
	t.Run("NilContext", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		var nilCtx context.Context
		_, err := echo.Remote(nilCtx, c, "x").Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // Task.Remote
		is.True(strings.Contains(err.Error(), "nil context"))
		_, err = ray.Put(nilCtx, c, 1).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // Put
		ref := ray.Put(ctx, c, 1)
		_, err = ref.Get(nilCtx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // Get
		_, _, err = ray.Wait(nilCtx, []ray.ObjectRef[int]{ref}, 1)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // Wait
		_, err = ray.GetAll(nilCtx, []ray.ObjectRef[int]{ref})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // GetAll
		h := counterClass.Remote(nilCtx, c, 0)
		is.Equal(ray.CodeOf(h.Err()), ray.InvalidArgument) // ActorClass.Remote
		_, err = ray.NewPlacementGroup(nilCtx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // NewPlacementGroup
		b := s.h.New(t, DefaultNodes())
		_, err = ray.NewCluster(nilCtx, b, nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // NewCluster
		is.NoErr(b.Close())
	})
	t.Run("BadOptions", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		_, err := echo.Remote(ctx, c, "x", ray.InBundle(nil, 0)).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // InBundle(nil, i) on a task
		is.True(strings.Contains(err.Error(), "InBundle(nil, 0)"))
		h := counterClass.Remote(ctx, c, 0, ray.InBundle(nil, 1))
		is.Equal(ray.CodeOf(h.Err()), ray.InvalidArgument) // InBundle(nil, i) on an actor
		for _, n := range []int{0, -1} {
			h := counterClass.Remote(ctx, c, 0, ray.MaxConcurrency(n))
			is.Equal(ray.CodeOf(h.Err()), ray.InvalidArgument) // MaxConcurrency below 1
			is.True(strings.Contains(h.Err().Error(), "MaxConcurrency"))
		}
	})
}
