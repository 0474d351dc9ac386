package cluster

import (
	"slices"

	"github.com/goray-dev/goray/backend"
)

// pgSolver places the unplaced bundles of one placement group on the
// cluster's nodes under the group's strategy: STRICT_PACK puts them all on
// one node, STRICT_SPREAD on distinct nodes (bipartite matching by
// augmenting paths), PACK and SPREAD try that first and fall back to a
// greedy fit that prefers used (PACK) or unused (SPREAD) nodes. It is
// used once per solve and runs under the runtime's lock.
type pgSolver struct {
	nodes []*node
	nres  int // resource vector length
	pg    *pgroup
	// avail is what a node offers: its capacity for a feasibility check,
	// its free amounts for placement.
	avail func(*node) []int64
	// skip leaves nodes out of a placement; nil makes the solve a
	// feasibility check, where a node coming back by itself counts.
	skip func(*node) bool

	assign  []*node           // the node of every bundle
	scratch map[*node][]int64 // tentative amounts of nodes touched (greedy)
}

// solve returns the node of every bundle, and whether all have one.
func (s *pgSolver) solve() ([]*node, bool) {
	s.assign = make([]*node, len(s.pg.bundles))
	// todo, the bundles without a node yet, is passed down rather than
	// kept in s, so that it stays on the stack.
	var todo []int
	for i, bu := range s.pg.bundles {
		if bu.node != nil {
			s.assign[i] = bu.node
		} else {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return s.assign, true
	}
	switch s.pg.spec.Strategy {
	case backend.StrictPack:
		return s.assign, s.packOne(todo)
	case backend.StrictSpread:
		return s.assign, s.spreadAll(todo)
	case backend.Pack:
		if s.packOne(todo) {
			return s.assign, true
		}
		s.reset(todo)
		return s.assign, s.greedy(todo, true)
	default: // Spread
		if s.spreadAll(todo) {
			// spreadAll checked each bundle against a node's amounts
			// alone, and each node holds one bundle, so this is exact.
			return s.assign, true
		}
		s.reset(todo)
		return s.assign, s.greedy(todo, false)
	}
}

// usable says whether work may be placed on n at all.
func (s *pgSolver) usable(n *node) bool {
	if s.skip == nil {
		return n.couldRun()
	}
	return n.alive && !n.draining && !s.skip(n)
}

// allowed says whether bundle i may go on n: its pin and label selector.
func (s *pgSolver) allowed(i int, n *node) bool {
	if s.pg.pinned != nil && s.pg.pinned[i] != n {
		return false
	}
	return s.pg.bundles[i].sel.matches(n)
}

// left returns n's tentative amounts, copied from avail on first use.
func (s *pgSolver) left(n *node) []int64 {
	if v, ok := s.scratch[n]; ok {
		return v
	}
	if s.scratch == nil {
		s.scratch = map[*node][]int64{}
	}
	v := slices.Clone(s.avail(n))
	s.scratch[n] = v
	return v
}

// candidates returns the nodes bundle i fits on alone.
func (s *pgSolver) candidates(i int) []*node {
	if s.pg.pinned != nil {
		n := s.pg.pinned[i]
		if s.usable(n) && s.allowed(i, n) {
			return []*node{n}
		}
		return nil
	}
	var out []*node
	for _, n := range s.nodes {
		if s.usable(n) && s.allowed(i, n) && fits(s.pg.bundles[i].demand, s.avail(n)) {
			out = append(out, n)
		}
	}
	return out
}

// packOne puts every unplaced bundle on one node: the node of the placed
// ones, if any, else the first that holds them all.
func (s *pgSolver) packOne(todo []int) bool {
	var fixed *node
	for _, n := range s.assign {
		if n != nil {
			fixed = n
		}
	}
	total := make([]int64, s.nres)
	for _, i := range todo {
		add(total, s.pg.bundles[i].demand)
	}
	try := func(n *node) bool {
		if !s.usable(n) || !fits(total, s.avail(n)) {
			return false
		}
		for _, i := range todo {
			if !s.allowed(i, n) {
				return false
			}
		}
		for _, i := range todo {
			s.assign[i] = n
		}
		return true
	}
	if fixed != nil {
		return try(fixed)
	}
	for _, n := range s.nodes {
		if try(n) {
			return true
		}
	}
	return false
}

// spreadAll puts every unplaced bundle on a node of its own, not one of
// the placed bundles' nodes.
func (s *pgSolver) spreadAll(todo []int) bool {
	m := matching{
		used:  map[*node]bool{},
		cands: make([][]*node, len(s.pg.bundles)),
		match: map[*node]int{},
	}
	for _, n := range s.assign {
		if n != nil {
			m.used[n] = true
		}
	}
	for _, i := range todo {
		m.cands[i] = s.candidates(i)
	}
	for _, i := range todo {
		if !m.augment(i, map[*node]bool{}) {
			return false
		}
	}
	for n, i := range m.match {
		s.assign[i] = n
	}
	return true
}

// matching is a bipartite matching of bundles to distinct nodes.
type matching struct {
	used  map[*node]bool // nodes of placed bundles: not candidates
	cands [][]*node      // by bundle
	match map[*node]int  // node -> bundle
}

// augment matches bundle i: a free candidate first, so bundles land in
// node order; then an augmenting path through nodes not yet seen.
func (m *matching) augment(i int, seen map[*node]bool) bool {
	for _, n := range m.cands[i] {
		if m.used[n] {
			continue
		}
		if _, busy := m.match[n]; !busy {
			m.match[n] = i
			return true
		}
	}
	for _, n := range m.cands[i] {
		if m.used[n] || seen[n] {
			continue
		}
		seen[n] = true
		j, ok := m.match[n]
		if !ok || m.augment(j, seen) {
			m.match[n] = i
			return true
		}
	}
	return false
}

// greedy places the largest bundles first onto nodes with room,
// preferring nodes already used (PACK) or unused (SPREAD).
func (s *pgSolver) greedy(todo []int, preferUsed bool) bool {
	order := slices.Clone(todo)
	slices.SortStableFunc(order, func(x, y int) int {
		return int(sum(s.pg.bundles[y].demand) - sum(s.pg.bundles[x].demand))
	})
	count := map[*node]int{}
	for _, n := range s.assign {
		if n != nil {
			count[n]++
		}
	}
	for _, i := range order {
		var best *node
		for _, n := range s.candidates(i) {
			if !fits(s.pg.bundles[i].demand, s.left(n)) {
				continue
			}
			if best == nil || (preferUsed && count[n] > count[best]) || (!preferUsed && count[n] < count[best]) {
				best = n
			}
		}
		if best == nil {
			return false
		}
		sub(s.left(best), s.pg.bundles[i].demand)
		s.assign[i] = best
		count[best]++
	}
	return true
}

// reset forgets the unplaced bundles' tentative nodes and amounts.
func (s *pgSolver) reset(todo []int) {
	for _, i := range todo {
		s.assign[i] = nil
	}
	clear(s.scratch)
}
