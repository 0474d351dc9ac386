package data

import "sort"

// positions says where each row of a block came from, compactly: a source
// block's positions are a few runs of consecutive rows (usually one), and
// an operator that drops or repeats rows keeps the runs and an index into
// them, 4 bytes a row, instead of a Pos a row.
type positions struct {
	runs []posRun
	idx  []int32 // nil: row i is position i of runs; else position idx[i]
	n    int     // rows
}

// posRun is n positions from start on: rows Row, Row+1, ... of Source, on
// lines Line, Line+1, ... (or all 0 when the source has no lines).
type posRun struct {
	start int // index of the run's first position
	n     int
	p     Pos
}

func (ps *positions) len() int { return ps.n }

// add appends one position, extending the last run when it follows on.
func (ps *positions) add(p Pos) {
	if k := len(ps.runs); k > 0 && ps.idx == nil {
		r := &ps.runs[k-1]
		next := int64(r.n)
		if r.p.Source == p.Source && r.p.Row+next == p.Row && ((r.p.Line == 0 && p.Line == 0) || r.p.Line+next == p.Line) {
			r.n++
			ps.n++
			return
		}
	}
	ps.runs = append(ps.runs, posRun{start: ps.n, n: 1, p: p})
	ps.n++
}

// base is the position index of row i.
func (ps *positions) base(i int) int {
	if ps.idx != nil {
		return int(ps.idx[i])
	}
	return i
}

// at is the position of row i.
func (ps *positions) at(i int) Pos {
	j := ps.base(i)
	k := sort.Search(len(ps.runs), func(k int) bool { return ps.runs[k].start > j }) - 1
	r := ps.runs[k]
	off := int64(j - r.start)
	p := r.p
	p.Row += off
	if p.Line > 0 {
		p.Line += off
	}
	return p
}

// pick returns the positions of rows sel[0], sel[1], ... of ps.
func (ps *positions) pick(sel []int32) positions {
	out := positions{runs: ps.runs, idx: sel, n: len(sel)}
	if ps.idx != nil {
		idx := make([]int32, len(sel))
		for k, i := range sel {
			idx[k] = ps.idx[i]
		}
		out.idx = idx
	}
	return out
}

// appendAll appends every position of o (for batches built across blocks).
func (ps *positions) appendAll(o *positions) {
	if ps.idx != nil { // only plain runs can grow
		var m positions
		for i := range ps.n {
			m.add(ps.at(i))
		}
		*ps = m
	}
	for i := range o.n {
		ps.add(o.at(i))
	}
}

// split cuts ps after n rows, sharing what it can.
func (ps *positions) split(n int) (head, tail positions) {
	if ps.idx != nil {
		return positions{runs: ps.runs, idx: ps.idx[:n:n], n: n}, positions{runs: ps.runs, idx: ps.idx[n:], n: ps.n - n}
	}
	for _, r := range ps.runs {
		switch {
		case r.start+r.n <= n:
			head.runs = append(head.runs, r)
		case r.start >= n:
			r.start -= n
			tail.runs = append(tail.runs, r)
		default: // the run straddles the cut
			k := n - r.start
			head.runs = append(head.runs, posRun{start: r.start, n: k, p: r.p})
			p := r.p
			p.Row += int64(k)
			if p.Line > 0 {
				p.Line += int64(k)
			}
			tail.runs = append(tail.runs, posRun{start: 0, n: r.n - k, p: p})
		}
	}
	head.n, tail.n = n, ps.n-n
	return head, tail
}
