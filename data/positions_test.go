package data

import (
	"testing"

	"github.com/matryer/is"
)

// TestPositions checks the compact positions against a plain list through
// adds, picks, splits and appends.
func TestPositions(t *testing.T) {
	var plain []Pos
	var ps positions
	add := func(p Pos) {
		plain = append(plain, p)
		ps.add(p)
	}
	for i := range 10 {
		add(Pos{Source: "a", Row: int64(i), Line: int64(i + 1)})
	}
	add(Pos{Source: "a", Row: 10, Line: 13}) // a blank line skipped
	for i := range 5 {
		add(Pos{Source: "b", Row: int64(i)})
	}
	check := func(is *is.I, ps positions, want []Pos) {
		is.Equal(ps.len(), len(want))
		for i := range want {
			is.Equal(ps.at(i), want[i])
		}
	}
	t.Run("add", func(t *testing.T) {
		is := is.New(t)
		check(is, ps, plain)
		is.Equal(len(ps.runs), 3)
	})
	t.Run("pick", func(t *testing.T) {
		is := is.New(t)
		sel := []int32{0, 0, 3, 10, 11, 15}
		picked := ps.pick(sel)
		want := []Pos{plain[0], plain[0], plain[3], plain[10], plain[11], plain[15]}
		check(is, picked, want)
		again := picked.pick([]int32{5, 2})
		check(is, again, []Pos{plain[15], plain[3]})
	})
	for _, n := range []int{0, 1, 5, 10, 11, 16} {
		t.Run("split", func(t *testing.T) {
			is := is.New(t)
			head, tail := ps.split(n)
			check(is, head, plain[:n])
			check(is, tail, plain[n:])
			picked := ps.pick([]int32{1, 2, 3, 12, 14})
			ph, pt := picked.split(2)
			check(is, ph, []Pos{plain[1], plain[2]})
			check(is, pt, []Pos{plain[3], plain[12], plain[14]})
			pt.appendAll(&head)
			check(is, pt, append([]Pos{plain[3], plain[12], plain[14]}, plain[:n]...))
			tail.appendAll(&ph)
			check(is, tail, append(append([]Pos{}, plain[n:]...), plain[1], plain[2]))
		})
	}
}
