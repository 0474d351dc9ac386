package tpu_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/tpu"
)

func TestNewSliceShape(t *testing.T) {
	tests := []struct {
		g                  tpu.Generation
		topology           string
		chipsPerHostArg    int
		chips              int
		chipsPerHost       int
		hosts              int
		podType            string
		gkePodType         string
		hostBounds         string
		chipsPerHostBounds string
		str                string
	}{
		{tpu.V6e, "1x1", 0, 1, 1, 1, "v6e-1", "v6e-1", "1,1,1", "1,1,1", "v6e 1x1"},
		{tpu.V6e, "2x2", 0, 4, 4, 1, "v6e-4", "v6e-4", "1,1,1", "2,2,1", "v6e 2x2"},
		{tpu.V6e, "2x4", 0, 8, 8, 1, "v6e-8", "v6e-8", "1,1,1", "2,4,1", "v6e 2x4"},
		{tpu.V6e, "2x4", 8, 8, 8, 1, "v6e-8", "v6e-8", "1,1,1", "2,4,1", "v6e 2x4"},
		{tpu.V6e, "2x4", 4, 8, 4, 2, "v6e-8", "v6e-8", "1,2,1", "2,2,1", "v6e 2x4 (4 chips per host)"},
		{tpu.V6e, "2x8", 0, 16, 4, 4, "v6e-16", "v6e-16", "1,4,1", "2,2,1", "v6e 2x8"},
		{tpu.V6e, "4x4", 0, 16, 4, 4, "v6e-16", "v6e-16", "2,2,1", "2,2,1", "v6e 4x4"},
		{tpu.V6e, "8x8", 0, 64, 4, 16, "v6e-64", "v6e-64", "4,4,1", "2,2,1", "v6e 8x8"},
		{tpu.V6e, "16x16", 0, 256, 4, 64, "v6e-256", "v6e-256", "8,8,1", "2,2,1", "v6e 16x16"},
		{tpu.V5e, "2x4", 0, 8, 8, 1, "v5litepod-8", "v5litepod-8", "1,1,1", "2,4,1", "v5e 2x4"},
		{tpu.V5e, "4x4", 0, 16, 4, 4, "v5litepod-16", "v5litepod-16", "2,2,1", "2,2,1", "v5e 4x4"},
		{tpu.V4, "2x2x1", 0, 4, 4, 1, "v4-8", "v4-8", "1,1,1", "2,2,1", "v4 2x2x1"},
		{tpu.V4, "2x2x2", 0, 8, 4, 2, "v4-16", "v4-16", "1,1,2", "2,2,1", "v4 2x2x2"},
		{tpu.V4, "4x4x4", 0, 64, 4, 16, "v4-128", "v4-128", "2,2,4", "2,2,1", "v4 4x4x4"},
		{tpu.V4, "4x4x8", 0, 128, 4, 32, "v4-256", "v4-256", "2,2,8", "2,2,1", "v4 4x4x8"},
		{tpu.V5p, "2x2x2", 0, 8, 4, 2, "v5p-16", "v5p-16", "1,1,2", "2,2,1", "v5p 2x2x2"},
		{tpu.V5p, "16x16x24", 0, 6144, 4, 1536, "v5p-12288", "v5p-12288", "8,8,24", "2,2,1", "v5p 16x16x24"},
		{tpu.V7x, "1x1x1", 0, 1, 1, 1, "v7x-2", "tpu7x-2", "1,1,1", "1,1,1", "v7x 1x1x1"},
		{tpu.V7x, "2x2x1", 0, 4, 4, 1, "v7x-8", "tpu7x-8", "1,1,1", "2,2,1", "v7x 2x2x1"},
		{tpu.V7x, "2x2x2", 0, 8, 4, 2, "v7x-16", "tpu7x-16", "1,1,2", "2,2,1", "v7x 2x2x2"},
		{tpu.V7x, "4x4x4", 0, 64, 4, 16, "v7x-128", "tpu7x-128", "2,2,4", "2,2,1", "v7x 4x4x4"},
		{tpu.V2, "4x4", 0, 16, 4, 4, "v2-32", "v2-32", "2,2,1", "2,2,1", "v2 4x4"},
		{tpu.V3, "32x32", 0, 1024, 4, 256, "v3-2048", "v3-2048", "16,16,1", "2,2,1", "v3 32x32"},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			is := is.New(t)
			s, err := tpu.NewSliceShape(tt.g, tt.topology, tt.chipsPerHostArg)
			is.NoErr(err)
			is.NoErr(s.Validate())
			is.Equal(s.Generation, tt.g)
			is.Equal(s.Topology, tpu.MustParseTopology(tt.topology))
			is.Equal(s.ChipsPerHost, tt.chipsPerHost)
			is.Equal(s.Chips(), tt.chips)
			is.Equal(s.Hosts(), tt.hosts)
			is.Equal(s.MultiHost(), tt.hosts > 1)
			is.Equal(s.PodType(), tt.podType)
			is.Equal(s.GKEPodType(), tt.gkePodType)
			is.Equal(s.HeadResource(), "TPU-"+tt.podType+"-head")
			is.Equal(s.AcceleratorType(), tt.g.AcceleratorType())
			is.Equal(s.HostBounds(), tt.hostBounds)
			is.Equal(s.ChipsPerHostBounds(), tt.chipsPerHostBounds)
			is.Equal(s.String(), tt.str)
			is.Equal(s.Hosts()*s.ChipsPerHost, s.Chips()) // hosts × chips per host covers the slice
		})
	}
}

func TestNewSliceShapeErrors(t *testing.T) {
	tests := []struct {
		name         string
		g            tpu.Generation
		topology     string
		chipsPerHost int
		sentinel     error
		message      string
	}{
		{"unknown generation", "v9", "4x4", 0, tpu.ErrUnknownGeneration, ""},
		{"empty generation", "", "4x4", 0, tpu.ErrUnknownGeneration, ""},
		{"topology not offered", tpu.V6e, "4x5", 0, tpu.ErrInvalidTopology,
			`topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16`},
		{"wrong dimensionality", tpu.V4, "4x4", 0, tpu.ErrInvalidTopology, ""},
		{"malformed topology", tpu.V6e, "4x", 0, tpu.ErrInvalidTopology, ""},
		// Chips per host must be a real VM's (Generation.ValidChipsPerHost);
		// TestValidChipsPerHost cites the machine-type sources.
		{"chips per host not an option", tpu.V6e, "4x4", 3, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 3 for v6e 4x4: no 3-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)"},
		{"negative chips per host", tpu.V6e, "4x4", -4, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host -4 for v6e 4x4: want a positive chip count; valid: 4 (ct6e-standard-4t)"},
		{"1 chip per host on v6e 2x2", tpu.V6e, "2x2", 1, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 1 for v6e 2x2: no 1-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)"},
		{"2 chips per host: no VM has 2", tpu.V6e, "2x2", 2, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 2 for v6e 2x2: no 2-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)"},
		{"8t serves only 2x4", tpu.V6e, "4x4", 8, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 8 for v6e 4x4: no 8-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)"},
		{"chips per host above the slice", tpu.V6e, "1x1", 4, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 4 for v6e 1x1: no 4-chip v6e VM serves it; valid: 1 (ct6e-standard-1t)"},
		{"v4 has only 4-chip VMs", tpu.V4, "2x2x2", 8, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 8 for v4 2x2x2: no 8-chip v4 VM serves it; valid: 4 (ct4p-hightpu-4t)"},
		{"8 on a 2x2", tpu.V6e, "2x2", 8, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 8 for v6e 2x2: no 8-chip v6e VM serves it; valid: 4 (ct6e-standard-4t)"},
		{"v7x 1x1x1 is tpu7x-standard-1t only", tpu.V7x, "1x1x1", 4, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 4 for v7x 1x1x1: no 4-chip v7x VM serves it; valid: 1 (tpu7x-standard-1t)"},
		{"v7x 2x2x2 has no 1-chip VMs", tpu.V7x, "2x2x2", 1, tpu.ErrInvalidChipsPerHost,
			"invalid chips per host 1 for v7x 2x2x2: no 1-chip v7x VM serves it; valid: 4 (tpu7x-standard-4t)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			s, err := tpu.NewSliceShape(tt.g, tt.topology, tt.chipsPerHost)
			is.True(errors.Is(err, tt.sentinel))
			is.Equal(s, tpu.SliceShape{})
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}

func TestNewSliceShapeNormalisesGeneration(t *testing.T) {
	for _, g := range []tpu.Generation{"TPU-V6E", "tpu-v6e-slice", " v6e "} {
		t.Run(string(g), func(t *testing.T) {
			is := is.New(t)
			s, err := tpu.NewSliceShape(g, " 4X4 ", 0)
			is.NoErr(err)
			is.Equal(s.Generation, tpu.V6e)
			is.Equal(s.String(), "v6e 4x4")
		})
	}
}

func TestSliceShapeLiteral(t *testing.T) {
	t.Run("zero chips per host uses the default", func(t *testing.T) {
		is := is.New(t)
		s := tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("2x4")}
		is.NoErr(s.Validate())
		is.Equal(s.Hosts(), 1)
		is.Equal(s.HostBounds(), "1,1,1")
		is.Equal(s.ChipsPerHostBounds(), "2,4,1")
		is.Equal(s.String(), "v6e 2x4")
		s = tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4")}
		is.Equal(s.Hosts(), 4)
		is.Equal(s.HostBounds(), "2,2,1")
	})
	t.Run("zero value", func(t *testing.T) {
		is := is.New(t)
		var s tpu.SliceShape
		is.True(errors.Is(s.Validate(), tpu.ErrUnknownGeneration))
		is.Equal(s.Chips(), 0)
		is.Equal(s.Hosts(), 0)
		is.True(!s.MultiHost())
		is.Equal(s.PodType(), "")
		is.Equal(s.GKEPodType(), "")
		is.Equal(s.HeadResource(), "")
		is.Equal(s.AcceleratorType(), "")
		is.Equal(s.HostBounds(), "")
		is.Equal(s.String(), "")
	})
	t.Run("invalid literals", func(t *testing.T) {
		is := is.New(t)
		s := tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x5")}
		is.True(errors.Is(s.Validate(), tpu.ErrInvalidTopology))
		s = tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4"), ChipsPerHost: 3}
		is.True(errors.Is(s.Validate(), tpu.ErrInvalidChipsPerHost))
		is.Equal(s.HostBounds(), "")
		is.Equal(s.ChipsPerHostBounds(), "")
		s = tpu.SliceShape{Generation: tpu.V4, Topology: tpu.MustParseTopology("2x2x2"), ChipsPerHost: 8}
		is.True(errors.Is(s.Validate(), tpu.ErrInvalidChipsPerHost))
		is.Equal(s.HostBounds(), "")
	})
}

func TestSliceShapeJSON(t *testing.T) {
	is := is.New(t)
	s, err := tpu.NewSliceShape(tpu.V6e, "2x4", 4)
	is.NoErr(err)
	out, err := json.Marshal(s)
	is.NoErr(err)
	is.Equal(string(out), `{"Generation":"v6e","Topology":"2x4","ChipsPerHost":4}`)
	var back tpu.SliceShape
	is.NoErr(json.Unmarshal(out, &back))
	is.Equal(back, s)
}

func TestParsePodType(t *testing.T) {
	tests := []struct {
		in    string
		g     tpu.Generation
		chips int
	}{
		{"v6e-16", tpu.V6e, 16},
		{"v6e-1", tpu.V6e, 1},
		// Legacy and GKE-only names: tpu-v5-lite-device nodes' "v5lite-N"
		// (1 core per chip: the device plugin's numCores counts any "lite"
		// generation as 1) and tpu7 nodes' "tpu7-N" (2 cores per chip).
		{"v5lite-8", tpu.V5e, 8},
		{"tpu7-16", tpu.V7x, 8},
		{"V6E-256", tpu.V6e, 256},
		{"TPU-V6E-16", tpu.V6e, 16},
		{" v6e-8 ", tpu.V6e, 8},
		{"v5litepod-16", tpu.V5e, 16},
		{"v5e-16", tpu.V5e, 16},
		{"v4-16", tpu.V4, 8},
		{"v4-8", tpu.V4, 4},
		{"v5p-16", tpu.V5p, 8},
		{"v2-32", tpu.V2, 16},
		{"v3-2048", tpu.V3, 1024},
		{"v7x-16", tpu.V7x, 8},
		{"tpu7x-16", tpu.V7x, 8},
		{"TPU7X-128", tpu.V7x, 64},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			g, chips, err := tpu.ParsePodType(tt.in)
			is.NoErr(err)
			is.Equal(g, tt.g)
			is.Equal(chips, tt.chips)
		})
	}
}

func TestParsePodTypeRoundTrip(t *testing.T) {
	for _, g := range tpu.Generations() {
		for _, topo := range g.ValidTopologies() {
			t.Run(g.String()+" "+topo.String(), func(t *testing.T) {
				is := is.New(t)
				s, err := tpu.NewSliceShape(g, topo.String(), 0)
				is.NoErr(err)
				for _, pod := range []string{s.PodType(), s.GKEPodType()} {
					pg, chips, err := tpu.ParsePodType(pod)
					is.NoErr(err)
					is.Equal(pg, g)
					is.Equal(chips, s.Chips())
				}
			})
		}
	}
}

func TestParsePodTypeErrors(t *testing.T) {
	tests := []struct {
		in                string
		unknownGeneration bool
		message           string
	}{
		{in: "", message: `invalid pod type "": want <generation>-<cores> such as "v6e-16" or "tpu7x-16"`},
		{in: "v6e", message: `invalid pod type "v6e": want <generation>-<cores> such as "v6e-16" or "tpu7x-16"`},
		{in: "v6e-"},
		{in: "v6e-16x"},
		{in: "-16"},
		{in: "tpu-16"},
		{in: "6e-16"},
		{in: "v6e--16"},
		{in: "v6e-0", message: `invalid pod type "v6e-0": the core count must be positive`},
		{in: "v4-15", message: `invalid pod type "v4-15": the core count must be a positive multiple of 2 (v4 has 2 cores per chip)`},
		{in: "tpu7x-3"},
		{in: "v6e-99999999999999999999999"},
		{in: "v9-16", unknownGeneration: true},
		{in: "v8x-16", unknownGeneration: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			g, chips, err := tpu.ParsePodType(tt.in)
			is.True(errors.Is(err, tpu.ErrInvalidPodType))
			is.Equal(errors.Is(err, tpu.ErrUnknownGeneration), tt.unknownGeneration)
			is.Equal(g, tpu.Generation(""))
			is.Equal(chips, 0)
			if tt.message != "" {
				is.Equal(err.Error(), tt.message)
			}
		})
	}
}

func TestWorkerOfChip(t *testing.T) {
	t.Run("v6e 4x4", func(t *testing.T) {
		is := is.New(t)
		s, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
		is.NoErr(err)
		// Hosts hold 2x2 chip blocks, numbered x-fastest.
		want := [4][4]int{{0, 0, 1, 1}, {0, 0, 1, 1}, {2, 2, 3, 3}, {2, 2, 3, 3}}
		for y := range 4 {
			for x := range 4 {
				is.Equal(s.WorkerOfChip(x, y, 0), want[y][x])
			}
		}
		is.Equal(s.WorkerOfChip(4, 0, 0), -1)
		is.Equal(s.WorkerOfChip(0, 0, 1), -1)
	})
	t.Run("v4 2x2x2", func(t *testing.T) {
		is := is.New(t)
		s, err := tpu.NewSliceShape(tpu.V4, "2x2x2", 0)
		is.NoErr(err)
		is.Equal(s.WorkerOfChip(1, 1, 0), 0)
		is.Equal(s.WorkerOfChip(0, 0, 1), 1)
	})
}
