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

// expectedTopologies is TPU_FACTS §2.3 (Ray's VALID_TPU_TOPOLOGY), as sets.
var expectedTopologies = map[tpu.Generation][]string{
	tpu.V2:  {"4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V3:  {"4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"},
	tpu.V4:  append([]string{"2x2x1", "2x2x2", "2x2x4", "2x4x4"}, grid3D([]int{4, 8, 12}, []int{4, 8, 12}, []int{4, 8, 12, 16})...),
	tpu.V5p: append([]string{"2x2x1", "2x2x2", "2x2x4", "2x4x4"}, grid3D(steps(4, 16, 4), steps(4, 16, 4), steps(4, 24, 4))...),
	tpu.V5e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V6e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	tpu.V7x: {"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"},
}

func TestValidTopologiesTable(t *testing.T) {
	counts := map[tpu.Generation]int{
		tpu.V2: 5, tpu.V3: 7, tpu.V4: 40, tpu.V5p: 100, tpu.V5e: 9, tpu.V6e: 9, tpu.V7x: 10,
	}
	for _, g := range tpu.Generations() {
		t.Run(g.String(), func(t *testing.T) {
			is := is.New(t)
			got := g.ValidTopologies()
			is.Equal(len(got), counts[g])

			gotStrings := make([]string, len(got))
			for i, topo := range got {
				gotStrings[i] = topo.String()
				is.Equal(topo.NumDims(), g.TopologyDims()) // every row has the generation's dimensionality
				is.True(g.SupportsTopology(topo))
				is.NoErr(g.ValidateTopology(topo))
			}
			want := slices.Clone(expectedTopologies[g])
			slices.Sort(want)
			sortedGot := slices.Clone(gotStrings)
			slices.Sort(sortedGot)
			is.Equal(sortedGot, want) // same membership, no duplicates

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
		{tpu.V3, "4x4 4x8 8x8 8x16 16x16 16x32 32x32"},
		{tpu.V5e, "1x1 2x2 2x4 2x8 4x4 4x8 8x8 8x16 16x16"},
		{tpu.V6e, "1x1 2x2 2x4 2x8 4x4 4x8 8x8 8x16 16x16"},
		{tpu.V7x, "2x2x1 2x2x2 2x2x4 2x4x4 4x4x4 4x4x8 4x8x8 8x8x8 8x8x16 8x16x16"},
	}
	for _, tt := range tests {
		t.Run(tt.g.String(), func(t *testing.T) {
			is := is.New(t)
			is.Equal(fmt.Sprint(tt.g.ValidTopologies()), "["+tt.want+"]")
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
		{tpu.V4, "4x16x16", false}, // GKE offers it; Ray's table does not
		{tpu.V4, "8x16x16", false},
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
		{tpu.V7x, "16x16x16", false},
		{tpu.V7x, "4x4x2", false},
		{tpu.V2, "2x2", false},
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
		{g: tpu.V6e, in: "2x2x2", message: `topology "2x2x2" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
		{g: tpu.V7x, in: "4x4", message: `topology "4x4" is not valid for v7x; valid: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x16, 8x16x16`},
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
