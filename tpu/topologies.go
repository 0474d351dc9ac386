package tpu

import (
	"cmp"
	"slices"
)

// topologyTable lists the slice topologies each generation offers, smallest
// slice first (ties broken by dimensions). It mirrors Ray's
// VALID_TPU_TOPOLOGY (python/ray/_private/accelerators/tpu.py) exactly:
//
//   - v2: 4x4 up to 16x16; v3: v2's set plus 16x32 and 32x32.
//   - v4: 2x2x1, 2x2x2, 2x2x4, 2x4x4, plus AxBxC with A, B ∈ {4, 8, 12} and
//     C ∈ {4, 8, 12, 16} (40 entries).
//   - v5p: the same four small shapes plus AxBxC with A, B ∈ {4, 8, 12, 16}
//     and C ∈ {4, 8, ..., 24} (100 entries).
//   - v5e and v6e: 1x1 up to 16x16 (9 entries).
//   - v7x: ten shapes from 2x2x1 to 8x16x16.
//
// GKE's own lists differ (v4 also offers 4x16x16 and 8x16x16, v5p and v7x
// have longer irregular lists, v6e lacks 2x8); they live in
// gkeTopologyTable. Update this table when Ray changes; the tests pin every
// row.
var topologyTable = map[Generation][]string{
	V2: {"4x4", "4x8", "8x8", "8x16", "16x16"},
	V3: {"4x4", "4x8", "8x8", "8x16", "16x16", "16x32", "32x32"},
	V4: {
		// 4 chips
		"2x2x1",
		// 8 chips
		"2x2x2",
		// 16 chips
		"2x2x4",
		// 32 chips
		"2x4x4",
		// 64 chips
		"4x4x4",
		// 128 chips
		"4x4x8", "4x8x4", "8x4x4",
		// 192 chips
		"4x4x12", "4x12x4", "12x4x4",
		// 256 chips
		"4x4x16", "4x8x8", "8x4x8", "8x8x4",
		// 384 chips
		"4x8x12", "4x12x8", "8x4x12", "8x12x4", "12x4x8", "12x8x4",
		// 512 chips
		"4x8x16", "8x4x16", "8x8x8",
		// 576 chips
		"4x12x12", "12x4x12", "12x12x4",
		// 768 chips
		"4x12x16", "8x8x12", "8x12x8", "12x4x16", "12x8x8",
		// 1024 chips
		"8x8x16",
		// 1152 chips
		"8x12x12", "12x8x12", "12x12x8",
		// 1536 chips
		"8x12x16", "12x8x16",
		// 1728 chips
		"12x12x12",
		// 2304 chips
		"12x12x16",
	},
	V5p: {
		// 4 chips
		"2x2x1",
		// 8 chips
		"2x2x2",
		// 16 chips
		"2x2x4",
		// 32 chips
		"2x4x4",
		// 64 chips
		"4x4x4",
		// 128 chips
		"4x4x8", "4x8x4", "8x4x4",
		// 192 chips
		"4x4x12", "4x12x4", "12x4x4",
		// 256 chips
		"4x4x16", "4x8x8", "4x16x4", "8x4x8", "8x8x4", "16x4x4",
		// 320 chips
		"4x4x20",
		// 384 chips
		"4x4x24", "4x8x12", "4x12x8", "8x4x12", "8x12x4", "12x4x8", "12x8x4",
		// 512 chips
		"4x8x16", "4x16x8", "8x4x16", "8x8x8", "8x16x4", "16x4x8", "16x8x4",
		// 576 chips
		"4x12x12", "12x4x12", "12x12x4",
		// 640 chips
		"4x8x20", "8x4x20",
		// 768 chips
		"4x8x24", "4x12x16", "4x16x12", "8x4x24", "8x8x12", "8x12x8",
		"12x4x16", "12x8x8", "12x16x4", "16x4x12", "16x12x4",
		// 960 chips
		"4x12x20", "12x4x20",
		// 1024 chips
		"4x16x16", "8x8x16", "8x16x8", "16x4x16", "16x8x8", "16x16x4",
		// 1152 chips
		"4x12x24", "8x12x12", "12x4x24", "12x8x12", "12x12x8",
		// 1280 chips
		"4x16x20", "8x8x20", "16x4x20",
		// 1536 chips
		"4x16x24", "8x8x24", "8x12x16", "8x16x12", "12x8x16",
		"12x16x8", "16x4x24", "16x8x12", "16x12x8",
		// 1728 chips
		"12x12x12",
		// 1920 chips
		"8x12x20", "12x8x20",
		// 2048 chips
		"8x16x16", "16x8x16", "16x16x8",
		// 2304 chips
		"8x12x24", "12x8x24", "12x12x16", "12x16x12", "16x12x12",
		// 2560 chips
		"8x16x20", "16x8x20",
		// 2880 chips
		"12x12x20",
		// 3072 chips
		"8x16x24", "12x16x16", "16x8x24", "16x12x16", "16x16x12",
		// 3456 chips
		"12x12x24",
		// 3840 chips
		"12x16x20", "16x12x20",
		// 4096 chips
		"16x16x16",
		// 4608 chips
		"12x16x24", "16x12x24",
		// 5120 chips
		"16x16x20",
		// 6144 chips
		"16x16x24",
	},
	V5e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	V6e: {"1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16"},
	V7x: {
		"2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4",
		"4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16",
	},
}

// parseTable parses a topology table. It runs once, at package
// initialisation.
func parseTable(table map[Generation][]string) map[Generation][]Topology {
	m := make(map[Generation][]Topology, len(table))
	for g, rows := range table {
		ts := make([]Topology, len(rows))
		for i, row := range rows {
			ts[i] = MustParseTopology(row)
		}
		m[g] = ts
	}
	return m
}

// compareTopologies orders topologies smallest slice first, ties by
// dimensions.
func compareTopologies(a, b Topology) int {
	return cmp.Or(cmp.Compare(a.Chips(), b.Chips()), slices.Compare(a.d[:], b.d[:]))
}

// rayTopologies, gkeTopologies and validTopologies (their union, sorted)
// are read-only after package initialisation.
var (
	rayTopologies   = parseTable(topologyTable)
	gkeTopologies   = parseTable(gkeTopologyTable)
	validTopologies = func() map[Generation][]Topology {
		m := make(map[Generation][]Topology, len(rayTopologies))
		for _, g := range generationOrder {
			u := slices.Concat(rayTopologies[g], gkeTopologies[g])
			slices.SortFunc(u, compareTopologies)
			m[g] = slices.Compact(u)
		}
		return m
	}()
)

// ValidTopologies returns the topologies g offers, smallest slice first
// (ties ordered by dimensions), or nil for an unknown generation: every
// shape Ray's table accepts and every shape GKE provisions (see RayTopology
// and GKETopology). The caller owns the returned slice.
func (g Generation) ValidTopologies() []Topology {
	return slices.Clone(validTopologies[g])
}

// SupportsTopology reports whether g offers a slice with topology t, in
// Ray's table or GKE's.
func (g Generation) SupportsTopology(t Topology) bool {
	return !t.IsZero() && slices.Contains(validTopologies[g], t)
}

// RayTopology reports whether t is in Ray's table of g's topologies
// (VALID_TPU_TOPOLOGY in python/ray/_private/accelerators/tpu.py), so
// Ray's slice_placement_group accepts it. Shapes GKE provisions beyond
// Ray's table, such as v7x 1x1x1 or v5p 4x4x28, fail Ray's check.
func (g Generation) RayTopology(t Topology) bool {
	return !t.IsZero() && slices.Contains(rayTopologies[g], t)
}

// GKETopology reports whether GKE provisions a slice of g with topology t
// on one of g's machine types. Shapes only Ray's table has, such as v6e
// 2x8 or v4 8x4x4, report false: a GKE node pool with that topology label
// does not exist.
func (g Generation) GKETopology(t Topology) bool {
	return !t.IsZero() && slices.Contains(gkeTopologies[g], t)
}

// ValidateTopology returns nil if g offers a slice with topology t. Otherwise
// it returns a *TopologyError wrapping ErrInvalidTopology whose message lists
// g's valid topologies, or a *GenerationError if g is unknown.
func (g Generation) ValidateTopology(t Topology) error {
	if !g.Valid() {
		return &GenerationError{Input: string(g)}
	}
	if g.SupportsTopology(t) {
		return nil
	}
	return &TopologyError{Input: t.String(), Generation: g, Valid: g.ValidTopologies()}
}

// ParseTopology parses s like the package-level ParseTopology and then
// checks that g offers it, so v6e "4x5" fails with
//
//	topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
//
// A string that does not parse at all also lists the valid topologies.
func (g Generation) ParseTopology(s string) (Topology, error) {
	if !g.Valid() {
		return Topology{}, &GenerationError{Input: string(g)}
	}
	t, terr := parseTopology(s)
	if terr != nil {
		terr.Generation, terr.Valid = g, g.ValidTopologies()
		return Topology{}, terr
	}
	if err := g.ValidateTopology(t); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// joinTopologies renders ts as "1x1, 2x2, ...".
func joinTopologies(ts []Topology) string {
	b := make([]byte, 0, 8*len(ts))
	for i, t := range ts {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, t.String()...)
	}
	return string(b)
}
