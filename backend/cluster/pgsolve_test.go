package cluster

import (
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestPGSolver checks the solver's strategies on one resource (CPU) and
// zone labels.
func TestPGSolver(t *testing.T) {
	nodes := func(caps ...int64) []*node {
		var out []*node
		for i, c := range caps {
			out = append(out, &node{idx: i, name: string(rune('a' + i)), labels: map[string]string{"zone": string(rune('a' + i))},
				capac: []int64{c}, free: []int64{c}, alive: true})
		}
		return out
	}
	group := func(strategy backend.Strategy, demands []int64, zones ...string) *pgroup {
		pg := &pgroup{spec: &backend.PlacementGroupSpec{Strategy: strategy}}
		for i, d := range demands {
			bu := &bundle{pg: pg, index: i, demand: []int64{d}}
			if i < len(zones) && zones[i] != "" {
				m, err := backend.LabelSelector{"zone": zones[i]}.Compile()
				if err != nil {
					t.Fatal(err)
				}
				bu.sel = nodeMatcher{Matcher: m}
			}
			pg.bundles = append(pg.bundles, bu)
		}
		return pg
	}
	names := func(ns []*node) string {
		out := ""
		for _, n := range ns {
			if n == nil {
				out += "-"
			} else {
				out += n.name
			}
		}
		return out
	}
	cases := []struct {
		name  string
		caps  []int64
		pg    *pgroup
		want  string // the node of each bundle
		found bool
	}{
		{"strict pack on one node", []int64{2, 4}, group(backend.StrictPack, []int64{2, 2}), "bb", true},
		{"strict pack too big", []int64{2, 2}, group(backend.StrictPack, []int64{2, 2}), "", false},
		{"strict spread on distinct nodes", []int64{4, 4, 4}, group(backend.StrictSpread, []int64{1, 1, 1}), "abc", true},
		{"strict spread with too few nodes", []int64{4, 4}, group(backend.StrictSpread, []int64{1, 1, 1}), "", false},
		// Bundle 0 may go to a or b, bundle 1 only to a: an augmenting
		// path moves bundle 0 to b.
		{"strict spread by augmenting path", []int64{4, 4}, group(backend.StrictSpread, []int64{1, 1}, "", "a"), "ba", true},
		{"pack falls back to greedy on used nodes", []int64{4, 4}, group(backend.Pack, []int64{2, 2, 2}), "aab", true},
		{"spread falls back to greedy on unused nodes", []int64{4, 2}, group(backend.Spread, []int64{2, 2, 2}), "aba", true},
		{"spread spreads", []int64{4, 4, 4}, group(backend.Spread, []int64{1, 1}), "ab", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			s := pgSolver{nodes: nodes(tc.caps...), nres: 1, pg: tc.pg, avail: func(n *node) []int64 { return n.free }, skip: func(*node) bool { return false }}
			assign, ok := s.solve()
			is.Equal(ok, tc.found)
			if tc.found {
				is.Equal(names(assign), tc.want)
			}
		})
	}
}
