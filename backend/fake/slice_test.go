package fake_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

var fakeTPUEnv = ray.NewTask("faketest.tpuEnv", func(ctx context.Context, _ struct{}) (map[string]string, error) {
	rc, _ := ray.Runtime(ctx)
	return rc.Environ(), nil
})

func TestSlices(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T) (*fake.Backend, *ray.Cluster) {
		t.Helper()
		b := fake.New(nil)
		c, err := ray.NewCluster(ctx, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return b, c
	}
	t.Run("ReserveRunRelease", func(t *testing.T) {
		is := is.New(t)
		b, c := open(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2, Name: "train"})
		is.NoErr(err)
		is.Equal(spg.NumHosts(), 8)
		is.Equal(spg.SliceNames(), []string{"v6e-16-fake-0", "v6e-16-fake-1"})
		envs, err := ray.RunOnSlice(ctx, spg, fakeTPUEnv, struct{}{})
		is.NoErr(err)
		for i, env := range envs {
			is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i%4))
			is.Equal(env[tpu.EnvMegascaleSliceID], strconv.Itoa(i/4))
			is.Equal(env[tpu.EnvMegascaleNumSlices], "2")
		}
		pgs := b.CallsOf(fake.KindPlacementGroup)
		is.Equal(len(pgs), 1)
		is.Equal(pgs[0].Name, "train")
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		is.Equal(len(states), 2)
		is.NoErr(spg.Release(ctx))
		states, err = ray.TPUSlices(ctx, c)
		is.NoErr(err)
		is.Equal(len(states), 0)
	})
	t.Run("BadRequests", func(t *testing.T) {
		is := is.New(t)
		_, c := open(t)
		_, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", ResourcesPerBundle: ray.Resources{ray.TPU: 3}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("ScriptedTimeout", func(t *testing.T) {
		is := is.New(t)
		b, c := open(t)
		b.PrependReactor(fake.KindPlacementGroup, "busy", func(fake.Call) (bool, any, error) {
			return true, nil, context.DeadlineExceeded
		})
		_, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "busy"})
		is.Equal(err, context.DeadlineExceeded)
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		is.Equal(len(states), 0)
		var _ backend.SliceReserver = b
	})
}
