package tpu_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

// grid3D lists AxBxC for every A in xs, B in ys, C in zs: the rule Ray's
// _get_larger_3d_topologies applies. It is written independently of the
// package table so that the test catches a mistyped row.
func grid3D(xs, ys, zs []int) []string {
	var out []string
	for _, x := range xs {
		for _, y := range ys {
			for _, z := range zs {
				out = append(out, fmt.Sprintf("%dx%dx%d", x, y, z))
			}
		}
	}
	return out
}

func steps(from, to, step int) []int {
	var out []int
	for n := from; n <= to; n += step {
		out = append(out, n)
	}
	return out
}

// expectedTopologies is Ray's VALID_TPU_TOPOLOGY
// (python/ray/_private/accelerators/tpu.py), as sets.
var expectedTopologies = map[tpu.Generation][]string{
	tpu.V2:  {"4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V3:  {"4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"},
	tpu.V4:  append([]string{"2x2x1", "2x2x2", "2x2x4", "2x4x4"}, grid3D([]int{4, 8, 12}, []int{4, 8, 12}, []int{4, 8, 12, 16})...),
	tpu.V5p: append([]string{"2x2x1", "2x2x2", "2x2x4", "2x4x4"}, grid3D(steps(4, 16, 4), steps(4, 16, 4), steps(4, 24, 4))...),
	tpu.V5e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V6e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V7x: {"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"},
}

// The GKE lists below are copied in the sources' own order, so a test
// failure points at the row that drifted.

// xpkV4 is xpk's ct4p-hightpu-4t supported_topologies
// (AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py).
var xpkV4 = []string{
	"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16",
	"8x16x16",
}

// pathwaysV4 is google/pathways-job ValidTpuTopologiesMap["ct4p-hightpu-4t"]
// (internal/controller/pathwaysjob_controller.go).
var pathwaysV4 = []string{
	"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "4x4x16", "8x8x8", "8x8x12",
	"8x8x16", "4x16x16", "8x16x16",
}

// xpkV5p is xpk's ct5p-hightpu-4t supported_topologies.
var xpkV5p = []string{
	"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8", "4x4x20",
	"4x8x12", "4x4x28", "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12", "4x4x52", "4x8x28",
	"4x12x20", "8x8x16", "4x4x68", "8x12x12", "4x4x76", "8x8x20", "4x12x28", "4x8x44",
	"4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12", "8x8x28", "4x4x116", "8x12x20",
	"4x4x124", "8x16x16", "4x12x44", "4x8x68", "4x20x28", "12x12x16", "4x4x148", "4x8x76",
	"4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172", "8x8x44", "12x12x20", "4x8x92",
	"4x4x188", "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52", "4x4x212", "12x12x24",
	"4x20x44", "8x16x28", "4x12x76", "4x8x116", "4x4x236", "12x16x20", "4x4x244", "4x8x124",
	"12x12x28", "16x16x16", "4x20x52", "8x12x44", "8x8x68", "4x12x92", "8x20x28", "12x16x24",
	"4x8x148", "12x20x20", "8x8x76", "4x28x44", "8x12x52", "16x16x20", "12x12x36", "4x8x164",
	"12x16x28", "4x20x68", "4x8x172", "4x12x116", "8x16x44", "12x20x24", "4x28x52", "8x8x92",
	"4x12x124", "4x8x188", "4x20x76", "16x16x24", "12x24x24", "16x20x28",
}

// xpkV7x is xpk's tpu7x-standard-1t (1x1x1) and tpu7x-standard-4t
// supported_topologies.
var xpkV7x = []string{
	"1x1x1",
	"12x12x12", "12x12x16", "12x12x20", "12x12x24", "12x12x28", "12x12x36", "12x16x16",
	"12x16x20", "12x16x24", "12x16x28", "12x20x20", "12x20x24", "12x24x24", "16x16x16",
	"16x16x20", "16x16x24", "16x16x32", "16x20x28", "16x24x24", "2x2x1", "2x2x2", "2x2x4",
	"2x4x4", "4x12x116", "4x12x12", "4x12x124", "4x12x20", "4x12x28", "4x12x44", "4x12x52",
	"4x12x68", "4x12x76", "4x12x92", "4x20x20", "4x20x28", "4x20x44", "4x20x52", "4x20x68",
	"4x20x76", "4x28x28", "4x28x44", "4x28x52", "4x4x116", "4x4x12", "4x4x124", "4x4x148",
	"4x4x164", "4x4x172", "4x4x188", "4x4x20", "4x4x212", "4x4x236", "4x4x244", "4x4x28",
	"4x4x4", "4x4x44", "4x4x52", "4x4x68", "4x4x76", "4x4x8", "4x4x92", "4x8x116", "4x8x12",
	"4x8x124", "4x8x148", "4x8x164", "4x8x172", "4x8x188", "4x8x20", "4x8x28", "4x8x44",
	"4x8x52", "4x8x68", "4x8x76", "4x8x8", "4x8x92", "8x12x12", "8x12x16", "8x12x20",
	"8x12x28", "8x12x44", "8x12x52", "8x16x16", "8x16x20", "8x16x28", "8x16x44", "8x20x20",
	"8x20x28", "8x8x12", "8x8x16", "8x8x20", "8x8x28", "8x8x44", "8x8x52", "8x8x68", "8x8x76",
	"8x8x8", "8x8x92",
}

// gkeV6e and gkeV5e are the shapes of GKE's v6e and v5e machine types:
// ct6e-standard-1t / ct5lp-hightpu-1t 1x1, ct6e-standard-8t /
// ct5lp-hightpu-8t 2x4, and the 4t types from 2x2 up (xpk's
// ct6e-standard-4t list; pathways-job's ct5lp-hightpu-4t and -8t lists;
// https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
var (
	gkeV6e = []string{"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"}
	gkeV5e = []string{"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"}
)

// expectedGKETopologies is what GKE provisions per generation. v3 is
// Ray's list plus the single-host 2x2 (ct3-hightpu-4t, label
// tpu-v3-device: the device plugin's "v3 device 2x2 topology" test in
// ai-on-gke/tpu-device-plugin pkg/tpu/util/util_test.go); no checked source
// lists GKE's v3 slices in full.
var expectedGKETopologies = map[tpu.Generation][]string{
	tpu.V2:  nil,
	tpu.V3:  append([]string{"2x2"}, expectedTopologies[tpu.V3]...),
	tpu.V4:  append(slices.Clone(xpkV4), pathwaysV4...),
	tpu.V5p: xpkV5p,
	tpu.V5e: gkeV5e,
	tpu.V6e: gkeV6e,
	tpu.V7x: xpkV7x,
}

// sortedSet sorts and deduplicates.
func sortedSet(ss ...[]string) []string {
	out := slices.Concat(ss...)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestValidTopologiesTable(t *testing.T) {
	// Ray's table alone, row counts.
	rayCounts := map[tpu.Generation]int{
		tpu.V2: 5, tpu.V3: 7, tpu.V4: 40, tpu.V5p: 100, tpu.V5e: 9, tpu.V6e: 9, tpu.V7x: 10,
	}
	for _, g := range tpu.Generations() {
		t.Run(g.String(), func(t *testing.T) {
			is := is.New(t)
			got := g.ValidTopologies()
			var all, ray, gke []string
			for _, topo := range got {
				all = append(all, topo.String())
				is.Equal(topo.NumDims(), g.TopologyDims()) // every row has the generation's dimensionality
				is.True(g.SupportsTopology(topo))
				is.NoErr(g.ValidateTopology(topo))
				is.True(g.RayTopology(topo) || g.GKETopology(topo)) // every valid shape has a source
				if g.RayTopology(topo) {
					ray = append(ray, topo.String())
				}
				if g.GKETopology(topo) {
					gke = append(gke, topo.String())
				}
			}
			is.Equal(len(ray), rayCounts[g])
			is.Equal(sortedSet(ray), sortedSet(expectedTopologies[g]))         // Ray's rows, exactly
			is.Equal(sortedSet(gke), sortedSet(expectedGKETopologies[g]))      // GKE's rows, exactly
			is.Equal(sortedSet(all), sortedSet(ray, expectedGKETopologies[g])) // valid = Ray ∪ GKE
			is.Equal(len(all), len(sortedSet(all)))                            // no duplicates

			// Smallest slice first, ties ordered by dimensions.
			is.True(slices.IsSortedFunc(got, func(a, b tpu.Topology) int {
				return cmp.Or(cmp.Compare(a.Chips(), b.Chips()), slices.Compare(a.Dims(), b.Dims()))
			}))
		})
	}
}

func TestValidTopologiesExplicitOrder(t *testing.T) {
	tests := []struct {
		g    tpu.Generation
		want string
	}{
		{tpu.V2, "4x4 4x8 8x8 8x16 16x16"},
		{tpu.V3, "2x2 4x4 4x8 8x8 8x16 16x16 16x32 32x32"},
		{tpu.V5e, "1x1 2x2 2x4 2x8 4x4 4x8 8x8 8x16 16x16"},
		{tpu.V6e, "1x1 2x2 2x4 2x8 4x4 4x8 8x8 8x16 16x16"},
	}
	for _, tt := range tests {
		t.Run(tt.g.String(), func(t *testing.T) {
			is := is.New(t)
			is.Equal(fmt.Sprint(tt.g.ValidTopologies()), "["+tt.want+"]")
		})
	}
}

func TestTopologySources(t *testing.T) {
	tests := []struct {
		g        tpu.Generation
		topology string
		ray, gke bool
	}{
		// Sources as in expectedTopologies and expectedGKETopologies.
		{tpu.V6e, "2x8", true, false},      // Ray only: no GKE v6e node pool is 2x8
		{tpu.V5e, "2x8", true, false},      // likewise v5e
		{tpu.V6e, "4x4", true, true},       // both
		{tpu.V7x, "1x1x1", false, true},    // tpu7x-standard-1t
		{tpu.V7x, "8x16x16", true, true},   // Ray's largest v7x
		{tpu.V7x, "16x16x16", false, true}, // above Ray's table
		{tpu.V7x, "4x4x244", false, true},
		{tpu.V5p, "16x16x24", true, true},
		{tpu.V5p, "4x4x28", false, true}, // beyond Ray's C ≤ 24
		{tpu.V5p, "16x20x28", false, true},
		{tpu.V5p, "8x4x4", true, false}, // Ray's permutation; GKE names it 4x4x8
		{tpu.V4, "4x16x16", false, true},
		{tpu.V4, "8x16x16", false, true},
		{tpu.V4, "12x12x16", true, false},
		{tpu.V3, "2x2", false, true}, // ct3-hightpu-4t, tpu-v3-device
		{tpu.V2, "4x4", true, false}, // GKE has no v2
		{tpu.V6e, "4x5", false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			topo := tpu.MustParseTopology(tt.topology)
			is.Equal(tt.g.RayTopology(topo), tt.ray)
			is.Equal(tt.g.GKETopology(topo), tt.gke)
			is.Equal(tt.g.SupportsTopology(topo), tt.ray || tt.gke)
		})
	}
}

func TestSupportsTopologyEdges(t *testing.T) {
	tests := []struct {
		g        tpu.Generation
		topology string
		want     bool
	}{
		{tpu.V4, "12x12x16", true},
		{tpu.V4, "4x4x16", true},
		{tpu.V4, "4x16x16", true}, // GKE offers it; Ray's table does not
		{tpu.V4, "8x16x16", true},
		{tpu.V4, "16x4x4", false},
		{tpu.V4, "4x4x20", false},
		{tpu.V4, "2x2", false},
		{tpu.V5p, "16x16x24", true},
		{tpu.V5p, "4x4x20", true},
		{tpu.V5p, "16x16x28", false},
		{tpu.V5p, "20x4x4", false},
		{tpu.V5p, "2x4x2", false},
		{tpu.V5e, "2x8", true},
		{tpu.V6e, "2x8", true},
		{tpu.V6e, "4x2", false},
		{tpu.V6e, "2x2x1", false},
		{tpu.V7x, "8x16x16", true},
		{tpu.V7x, "16x16x16", true},
		{tpu.V7x, "1x1x1", true},
		{tpu.V7x, "32x32x32", false},
		{tpu.V7x, "4x4x2", false},
		{tpu.V2, "2x2", false},
		{tpu.V3, "2x2", true},
		{tpu.V3, "32x32", true},
		{tpu.V2, "32x32", false},
		{tpu.Generation("v9"), "4x4", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.topology, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tt.g.SupportsTopology(tpu.MustParseTopology(tt.topology)), tt.want)
		})
	}
}

func TestValidTopologiesIsACopy(t *testing.T) {
	is := is.New(t)
	ts := tpu.V6e.ValidTopologies()
	ts[0] = tpu.MustParseTopology("99x99")
	is.Equal(tpu.V6e.ValidTopologies()[0].String(), "1x1")
	is.Equal(tpu.Generation("v9").ValidTopologies(), nil)
}

func TestGenerationParseTopology(t *testing.T) {
	tests := []struct {
		g       tpu.Generation
		in      string
		want    string // canonical topology, or "" when an error is expected
		message string
	}{
		{g: tpu.V6e, in: "4x4", want: "4x4"},
		{g: tpu.V6e, in: " 4X4 ", want: "4x4"},
		{g: tpu.V4, in: "2x2x2", want: "2x2x2"},
		{g: tpu.V7x, in: "2X2X1", want: "2x2x1"},
		{g: tpu.V6e, in: "4x5", message: `topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
		{g: tpu.V6e, in: " 4X5 ", message: `topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
		{g: tpu.V6e, in: "2x2x2", message: `topology "2x2x2" is three-dimensional, but v6e topologies are two-dimensional: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
		{g: tpu.V5p, in: "4x4", message: `topology "4x4" is two-dimensional, but v5p topologies are three-dimensional, such as 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8 (164 in all; goray validate v5p lists them)`},
		{g: tpu.V2, in: "2x2", message: `topology "2x2" is not valid for v2; valid: 4x4, 4x8, 8x8, 8x16, 16x16`},
		{g: tpu.V6e, in: "4x0", message: `invalid topology "4x0": dimension 2 is "0"; want a positive integer no larger than 1024; valid for v6e: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
	}
	for _, tt := range tests {
		t.Run(string(tt.g)+" "+tt.in, func(t *testing.T) {
			is := is.New(t)
			topo, err := tt.g.ParseTopology(tt.in)
			if tt.want != "" {
				is.NoErr(err)
				is.Equal(topo.String(), tt.want)
				return
			}
			is.True(topo.IsZero())
			is.True(errors.Is(err, tpu.ErrInvalidTopology))
			is.Equal(err.Error(), tt.message)
			var terr *tpu.TopologyError
			is.True(errors.As(err, &terr))
			is.Equal(terr.Generation, tt.g)
			is.Equal(terr.Valid, tt.g.ValidTopologies())
		})
	}
}

func TestGenerationParseTopologyUnknownGeneration(t *testing.T) {
	is := is.New(t)
	_, err := tpu.Generation("v9").ParseTopology("4x4")
	is.True(errors.Is(err, tpu.ErrUnknownGeneration))
	err = tpu.Generation("v9").ValidateTopology(tpu.MustParseTopology("4x4"))
	is.True(errors.Is(err, tpu.ErrUnknownGeneration))
}
