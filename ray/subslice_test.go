package ray_test

import (
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/internal/testkit"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// TestSubsliceGroup: a sub-slice is a SlicePlacementGroup like any other
// (SliceSpec.Subslice): its hosts, env and RunOnSlice are the sub-slice's,
// and Release frees it, so the whole slice can be reserved again.
func TestSubsliceGroup(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, local.TPUSliceSpec{Generation: "v6e", Topology: "8x8", Subslices: []string{"4x4"}})
	ctx := within(t, 20*time.Second)

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "8x8", Subslice: "4x4", Name: "sub"})
	is.NoErr(err)
	rs := spg.Slices()
	is.Equal(len(rs), 1)
	is.Equal(rs[0].Name, "v6e-64-0")
	is.Equal(rs[0].Subslice, "4x4")
	is.Equal(spg.Hosts(), []string{"v6e-64-0-w0", "v6e-64-0-w1", "v6e-64-0-w4", "v6e-64-0-w5"})
	is.Equal(spg.WorkerEnv(3)[tpu.EnvWorkerID], "3")
	is.Equal(spg.WorkerEnv(3)[tpu.EnvTopology], "4x4")

	envs, err := ray.RunOnSlice(ctx, spg, sliceWorker, struct{}{})
	is.NoErr(err)
	is.Equal(len(envs), 4) // one task per host of the sub-slice
	for i, env := range envs {
		is.Equal(env[tpu.EnvWorkerID], spg.WorkerEnv(i)[tpu.EnvWorkerID])
		is.Equal(env[tpu.EnvTopology], "4x4")
		is.Equal(env["HOST"], spg.Hosts()[i])
	}

	is.NoErr(spg.Release(ctx))
	whole, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "8x8"})
	is.NoErr(err) // the sub-slice's release freed the slice
	is.Equal(whole.NumHosts(), 16)
	is.NoErr(whole.Release(ctx))
	assertAllFree(t, c)
}

func TestSubsliceGroupBadSpec(t *testing.T) {
	c := tpuCluster(t, local.TPUSliceSpec{Generation: "v6e", Topology: "8x8", Subslices: []string{"4x4"}})
	cases := []struct {
		name string
		spec ray.SliceSpec
		want string
	}{
		{"two slices", ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "8x8", Subslice: "4x4", NumSlices: 2}, "sub-slice"},
		{"not a sub-slice of the topology", ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "8x8", Subslice: "16x16"}, "16x16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, err := ray.NewSlicePlacementGroup(within(t, 5*time.Second), c, tc.spec)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			testkit.ErrContains(t, err, tc.want)
		})
	}
}
