package train_test

import (
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

func TestScalingConfig(t *testing.T) {
	_, c := newCluster(t, "2x2", 1, false)
	for _, tc := range []struct {
		name    string
		scaling train.ScalingConfig
		run     train.RunConfig
		workers int
		err     string
	}{
		{name: "one v6e 4x4", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}, workers: 4},
		{name: "two v6e 4x4", scaling: train.ScalingConfig{AcceleratorVersion: "TPU-V6E", Topology: "4x4", NumSlices: 2, NumWorkers: 8}, workers: 8},
		{name: "v6e 8x16", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "8x16"}, workers: 32},
		{name: "v5p 2x2x4", scaling: train.ScalingConfig{AcceleratorVersion: "v5p", Topology: "2x2x4"}, workers: 4},
		{name: "v6e 2x4 is one host", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4"}, workers: 1},
		{name: "v6e 2x4 as two 4-chip hosts", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4}, workers: 2},
		{name: "extra CPU per worker", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", ResourcesPerWorker: ray.Resources{ray.CPU: 8, ray.TPU: 4}}, workers: 4},
		{name: "NumWorkers contradicts the topology", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2, NumWorkers: 16},
			err: "NumWorkers is 16, but 2 × v6e 4x4 (4 hosts of 4 chips each) means 8 workers, one per host"},
		{name: "unknown topology", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x5"}, err: "8x16"},
		{name: "unknown generation", scaling: train.ScalingConfig{AcceleratorVersion: "v9z", Topology: "4x4"}, err: "v9z"},
		{name: "no topology", scaling: train.ScalingConfig{AcceleratorVersion: "v6e"}, err: "needs AcceleratorVersion"},
		{name: "negative slices", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: -1}, err: "NumSlices -1 is negative"},
		{name: "part of a host", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", ResourcesPerWorker: ray.Resources{ray.TPU: 1}},
			err: "asks for 1 TPU chips, but a worker holds a whole v6e 4x4 host, which has 4"},
		{name: "bad run name", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}, run: train.RunConfig{Name: "a/b"}, err: `Name "a/b"`},
		{name: "bad progress", scaling: train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}, run: train.RunConfig{Progress: 9}, err: "Progress 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			tr, err := train.New(c, counting, countCfg{}, tc.scaling, tc.run)
			if tc.err != "" {
				is.True(err != nil)
				is.True(strings.Contains(err.Error(), tc.err)) // the message says what is wrong and what is valid
				is.Equal(ray.CodeOf(err), ray.InvalidArgument) // a configuration error, not Unknown
				return
			}
			is.NoErr(err)
			is.Equal(tr.NumWorkers(), tc.workers)
		})
	}
}
