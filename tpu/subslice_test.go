package tpu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

// TestNewSubslice checks sub-slices against the device plugin's rules
// (ai-on-gke/tpu-device-plugin pkg/tpu/util/util.go: the sub-slice
// topology set, the gke-tpu-slice-<t>-id label for v4, v5litepod, v5p and
// v6e and gke-tpu-partition-<t>-id otherwise) and Ray's label
// ray.io/tpu-subslice-<t> (python/ray/util/tpu.py). Host numbering is
// goray's x-fastest order, as WorkerOfChip.
func TestNewSubslice(t *testing.T) {
	tests := []struct {
		parent   tpu.SliceShape
		topology string
		count    int
		workers  map[int][]int // sub-slice index → parent worker IDs
		gke, ray string
	}{
		{mustShape(t, tpu.V6e, "16x16", 0), "4x4", 16,
			map[int][]int{0: {0, 1, 8, 9}, 1: {2, 3, 10, 11}, 4: {16, 17, 24, 25}, 15: {54, 55, 62, 63}},
			"cloud.google.com/gke-tpu-slice-4x4-id", "ray.io/tpu-subslice-4x4"},
		{mustShape(t, tpu.V6e, "4x4", 0), "2x2", 4,
			map[int][]int{0: {0}, 3: {3}},
			"cloud.google.com/gke-tpu-slice-2x2-id", "ray.io/tpu-subslice-2x2"},
		{mustShape(t, tpu.V5e, "2x4", 4), "2x2", 2,
			map[int][]int{0: {0}, 1: {1}},
			"cloud.google.com/gke-tpu-slice-2x2-id", "ray.io/tpu-subslice-2x2"},
		{mustShape(t, tpu.V5p, "4x4x4", 0), "2x2x2", 8,
			map[int][]int{0: {0, 4}, 1: {1, 5}, 2: {2, 6}, 7: {11, 15}},
			"cloud.google.com/gke-tpu-slice-2x2x2-id", "ray.io/tpu-subslice-2x2x2"},
		// v7x uses the partition label (the device plugin's
		// isSliceTemplateGen covers v4, v5litepod, v5p and v6e only).
		{mustShape(t, tpu.V7x, "4x4x4", 0), "2x2x1", 16,
			map[int][]int{0: {0}, 1: {1}, 15: {15}},
			"cloud.google.com/gke-tpu-partition-2x2x1-id", "ray.io/tpu-subslice-2x2x1"},
	}
	for _, tt := range tests {
		t.Run(tt.parent.String()+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			sub, err := tpu.NewSubslice(tt.parent, tt.topology)
			is.NoErr(err)
			is.Equal(sub.Count(), tt.count)
			is.Equal(sub.GKELabel(), tt.gke)
			is.Equal(sub.RayLabel(), tt.ray)
			is.Equal(sub.Shape.ChipsPerHost, tt.parent.ChipsPerHost)
			for i, want := range tt.workers {
				got, err := sub.Workers(i)
				is.NoErr(err)
				is.Equal(got, want)
			}
			// The sub-slices partition the parent's hosts.
			seen := map[int]bool{}
			for i := range sub.Count() {
				ws, err := sub.Workers(i)
				is.NoErr(err)
				is.Equal(len(ws), sub.Shape.Hosts())
				for _, w := range ws {
					is.True(!seen[w])
					seen[w] = true
				}
			}
			is.Equal(len(seen), tt.parent.Hosts())
			_, err = sub.Workers(sub.Count())
			is.True(errors.Is(err, tpu.ErrInvalidArgument))
		})
	}
	is := is.New(t)
	is.Equal(tpu.AnnotationGKESubsliceTopology, "cloud.google.com/gke-tpu-slice-topology")
}

// TestNewSubsliceErrors follows the device plugin's IsValidSubSliceTopology
// cases (ai-on-gke/tpu-device-plugin pkg/tpu/util/util_test.go): not in the
// sub-slice set, larger than the topology, wrong dimensionality; plus
// goray's whole-host and even-split rules.
func TestNewSubsliceErrors(t *testing.T) {
	v5e8 := mustShape(t, tpu.V5e, "2x4", 4)
	v6e16 := mustShape(t, tpu.V6e, "4x4", 0)
	tests := []struct {
		name     string
		parent   tpu.SliceShape
		topology string
		message  string
	}{
		{"not a sub-slice shape", v5e8, "2x3", "invalid topology: 2x3 is not a sub-slice of v5e 2x4 (4 chips per host); valid: 2x2, 2x4"},
		{"larger than the slice", v5e8, "4x4", ""},
		{"wrong dimensions", v5e8, "2x2x1", ""},
		{"part of a host", v6e16, "1x1", "invalid topology: 1x1 is not a sub-slice of v6e 4x4; valid: 2x2, 2x4, 4x4"},
		{"does not split evenly", mustShape(t, tpu.V6e, "8x16", 0), "16x16", ""},
		{"malformed", v6e16, "2x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			sub, err := tpu.NewSubslice(tt.parent, tt.topology)
			is.True(errors.Is(err, tpu.ErrInvalidTopology))
			is.Equal(sub, tpu.Subslice{})
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}

// TestSubsliceEnv replays the device plugin's sub-slicing cases of
// TestInitEnvs (ai-on-gke/tpu-device-plugin pkg/tpu/util/util_test.go): the
// env is rewritten to the sub-slice's topology, pod type and host bounds.
func TestSubsliceEnv(t *testing.T) {
	tests := []struct {
		name     string
		parent   tpu.SliceShape
		topology string
		want     map[string]string
	}{
		{"4x4 in v6e 16x16", mustShape(t, tpu.V6e, "16x16", 0), "4x4",
			dpEnv("v6e-16", "4x4", ports4, ff, "2,2,1", "2,2,1", nil)},
		{"2x2 in v5e 2x4 on 4-chip hosts", mustShape(t, tpu.V5e, "2x4", 4), "2x2",
			dpEnv("v5litepod-4", "2x2", ports4, ff, "1,1,1", "2,2,1", single)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			sub, err := tpu.NewSubslice(tt.parent, tt.topology)
			is.NoErr(err)
			env, err := tpu.DevicePluginEnv(sub.Shape, 0)
			is.NoErr(err)
			is.Equal(env, tt.want)
		})
	}
}

// TestSubsliceTopologies lists the device plugin's sub-slice topologies
// (validSubsliceTopologySet) that fit each parent in whole hosts.
func TestSubsliceTopologies(t *testing.T) {
	tests := []struct {
		parent tpu.SliceShape
		want   string
	}{
		{mustShape(t, tpu.V6e, "16x16", 0), "[2x2 2x4 4x4 4x8 8x8 8x16 16x16]"},
		{mustShape(t, tpu.V6e, "2x4", 0), "[2x4]"}, // one 8-chip host: nothing smaller
		{mustShape(t, tpu.V7x, "4x4x4", 0), "[2x2x1 2x2x2 2x2x4 2x4x4 4x4x4]"},
		{tpu.SliceShape{}, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.parent.String(), func(t *testing.T) {
			is := is.New(t)
			is.Equal(fmt.Sprint(tpu.SubsliceTopologies(tt.parent)), tt.want)
		})
	}
}
