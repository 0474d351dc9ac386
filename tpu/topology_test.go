package tpu_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestParseTopology(t *testing.T) {
	tests := []struct {
		in    string
		str   string
		dims  []int
		chips int
	}{
		{"4x4", "4x4", []int{4, 4}, 16},
		{"1x1", "1x1", []int{1, 1}, 1},
		{"2x2x2", "2x2x2", []int{2, 2, 2}, 8},
		{" 2X2x2 ", "2x2x2", []int{2, 2, 2}, 8},
		{"2 x 4", "2x4", []int{2, 4}, 8},
		{"\t16X16\n", "16x16", []int{16, 16}, 256},
		{"04x4", "4x4", []int{4, 4}, 16},
		{"16x16x24", "16x16x24", []int{16, 16, 24}, 6144},
		{"4x5", "4x5", []int{4, 5}, 20}, // syntactically fine; no generation offers it
		{"1024x1024x1024", "1024x1024x1024", []int{1024, 1024, 1024}, 1 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			topo, err := tpu.ParseTopology(tt.in)
			is.NoErr(err)
			is.Equal(topo.String(), tt.str)
			is.Equal(topo.Dims(), tt.dims)
			is.Equal(topo.NumDims(), len(tt.dims))
			is.Equal(topo.Chips(), tt.chips)
			is.True(!topo.IsZero())
			is.Equal(tpu.MustParseTopology(tt.str), topo) // comparable value
		})
	}
}

func TestParseTopologyErrors(t *testing.T) {
	tests := []struct {
		in      string
		message string
	}{
		{"", `invalid topology "": empty; want a chip grid such as "4x4" or "2x2x2"`},
		{"   ", `invalid topology "   ": empty; want a chip grid such as "4x4" or "2x2x2"`},
		{"4", `invalid topology "4": not a chip grid; want 2 dimensions (such as "4x4") or 3 (such as "2x2x2")`},
		{"abc", `invalid topology "abc": not a chip grid; want 2 dimensions (such as "4x4") or 3 (such as "2x2x2")`},
		{"2x2x2x2", `invalid topology "2x2x2x2": has 4 dimensions; want 2 (such as "4x4") or 3 (such as "2x2x2")`},
		{"4x0", `invalid topology "4x0": dimension 2 is "0"; want a positive integer no larger than 1024`},
		{"0x4", `invalid topology "0x4": dimension 1 is "0"; want a positive integer no larger than 1024`},
		{"4x-4", `invalid topology "4x-4": dimension 2 is "-4"; want a positive integer no larger than 1024`},
		{"-4x4", `invalid topology "-4x4": dimension 1 is "-4"; want a positive integer no larger than 1024`},
		{"+4x4", `invalid topology "+4x4": dimension 1 is "+4"; want a positive integer no larger than 1024`},
		{"4x", `invalid topology "4x": dimension 2 is ""; want a positive integer no larger than 1024`},
		{"x4", `invalid topology "x4": dimension 1 is ""; want a positive integer no larger than 1024`},
		{"4xx4", `invalid topology "4xx4": dimension 2 is ""; want a positive integer no larger than 1024`},
		{"4.0x4", `invalid topology "4.0x4": dimension 1 is "4.0"; want a positive integer no larger than 1024`},
		{"4x1025", `invalid topology "4x1025": dimension 2 is "1025"; want a positive integer no larger than 1024`},
		{"4x99999999999999999999", `invalid topology "4x99999999999999999999": dimension 2 is "99999999999999999999"; want a positive integer no larger than 1024`},
		{"4×4", `invalid topology "4×4": not a chip grid; want 2 dimensions (such as "4x4") or 3 (such as "2x2x2")`},
		{"a x b", `invalid topology "a x b": dimension 1 is "a"; want a positive integer no larger than 1024`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			topo, err := tpu.ParseTopology(tt.in)
			is.True(err != nil)
			is.True(topo.IsZero())
			is.True(errors.Is(err, tpu.ErrInvalidTopology))
			var terr *tpu.TopologyError
			is.True(errors.As(err, &terr))
			is.Equal(terr.Input, tt.in)
			is.Equal(err.Error(), tt.message)
		})
	}
}

func TestMustParseTopologyPanics(t *testing.T) {
	is := is.New(t)
	defer func() {
		r := recover()
		err, ok := r.(error)
		is.True(ok)
		is.True(errors.Is(err, tpu.ErrInvalidTopology))
	}()
	tpu.MustParseTopology("4x0")
	t.Fatal("MustParseTopology did not panic")
}

func TestTopologyZeroValue(t *testing.T) {
	is := is.New(t)
	var topo tpu.Topology
	is.True(topo.IsZero())
	is.Equal(topo.String(), "")
	is.Equal(topo.Chips(), 0)
	is.Equal(topo.NumDims(), 0)
	is.Equal(topo.Dims(), nil)
	for _, g := range tpu.Generations() {
		is.True(!g.SupportsTopology(topo))
		is.True(errors.Is(g.ValidateTopology(topo), tpu.ErrInvalidTopology))
	}
}

func TestTopologyDimsIsACopy(t *testing.T) {
	is := is.New(t)
	topo := tpu.MustParseTopology("4x4")
	topo.Dims()[0] = 99
	is.Equal(topo.String(), "4x4")
}

func TestTopologyText(t *testing.T) {
	type doc struct {
		Topology tpu.Topology `json:"topology"`
	}
	tests := []struct {
		in   string
		want tpu.Topology
		out  string
	}{
		{`{"topology":"4x4"}`, tpu.MustParseTopology("4x4"), `{"topology":"4x4"}`},
		{`{"topology":" 2X2x2 "}`, tpu.MustParseTopology("2x2x2"), `{"topology":"2x2x2"}`},
		{`{"topology":""}`, tpu.Topology{}, `{"topology":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			var d doc
			is.NoErr(json.Unmarshal([]byte(tt.in), &d))
			is.Equal(d.Topology, tt.want)
			out, err := json.Marshal(d)
			is.NoErr(err)
			is.Equal(string(out), tt.out)
		})
	}
	t.Run("invalid", func(t *testing.T) {
		is := is.New(t)
		var d doc
		err := json.Unmarshal([]byte(`{"topology":"4x0"}`), &d)
		is.True(errors.Is(err, tpu.ErrInvalidTopology))
	})
}

func FuzzParseTopology(f *testing.F) {
	for _, seed := range []string{
		"4x4", " 2X2x2 ", "1x1", "16x16x24", "0x4", "4x-4", "4x", "x", "", "4x4x4x4",
		"1024x1024x1024", "1025x1", "4 x 4", "+4x4", "4×4", "99999999999999999999x1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		topo, err := tpu.ParseTopology(s)
		if err != nil {
			if !errors.Is(err, tpu.ErrInvalidTopology) {
				t.Fatalf("ParseTopology(%q) error %v does not wrap ErrInvalidTopology", s, err)
			}
			var terr *tpu.TopologyError
			if !errors.As(err, &terr) || terr.Input != s {
				t.Fatalf("ParseTopology(%q) error %#v does not carry the input", s, err)
			}
			if !topo.IsZero() {
				t.Fatalf("ParseTopology(%q) returned %v with an error", s, topo)
			}
			return
		}
		str := topo.String()
		back, err := tpu.ParseTopology(str)
		if err != nil || back != topo {
			t.Fatalf("ParseTopology(%q) = %v; reparsing %q gave %v, %v", s, topo, str, back, err)
		}
		if n := topo.NumDims(); n != 2 && n != 3 {
			t.Fatalf("ParseTopology(%q) has %d dimensions", s, n)
		}
		chips := 1
		for _, d := range topo.Dims() {
			if d < 1 || d > tpu.MaxTopologyDim {
				t.Fatalf("ParseTopology(%q) has dimension %d", s, d)
			}
			chips *= d
		}
		if topo.Chips() != chips || chips < 1 {
			t.Fatalf("ParseTopology(%q).Chips() = %d, want %d", s, topo.Chips(), chips)
		}
		if str != strings.ToLower(strings.TrimSpace(str)) || strings.ContainsAny(str, " \t") {
			t.Fatalf("ParseTopology(%q).String() = %q is not canonical", s, str)
		}
	})
}
