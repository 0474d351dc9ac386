package local_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

var iciEnv = ray.NewTask("localtest.iciEnv", func(ctx context.Context, _ struct{}) (string, error) {
	rc, _ := ray.Runtime(ctx)
	return rc.Environ()[tpu.EnvICIResiliency], nil
})

// A slice whose nodes GKE labels as created without ICI resiliency gives
// its workers ENABLE_ICI_RESILIENCY=false, as the device plugin does; an
// unlabelled slice of the same shape says true, whole or as sub-slices.
func TestICIResiliencyFollowsNodeLabel(t *testing.T) {
	for _, off := range []bool{false, true} {
		is := is.New(t)
		_, c := startedTPUCluster(t, local.TPUSliceSpec{Generation: "v5p", Topology: "4x4x8", NoICIResiliency: off})
		ctx := context.Background()
		want := map[bool]string{false: "true", true: "false"}[off]
		for _, topo := range []string{"4x4x8", "4x4x4"} {
			spec := ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "4x4x8"}
			if topo != "4x4x8" {
				spec.Subslice = topo
			}
			spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
			is.NoErr(err)
			got, err := ray.RunOnSlice(ctx, spg, iciEnv, struct{}{})
			is.NoErr(err)
			for _, v := range got {
				is.Equal(v, want)
			}
			is.NoErr(spg.Release(ctx))
		}
	}
}
