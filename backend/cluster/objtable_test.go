package cluster

import (
	"slices"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestObjTable checks the object index against a map, through runs of IDs
// that span pages, deletions in and out of order, and empty pages going.
func TestObjTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		put  []uint64
		del  []uint64
	}{
		{name: "empty"},
		{name: "one", put: []uint64{1}},
		{name: "one page, deleted in order", put: span(1, objPageSize-1), del: span(1, objPageSize-1)},
		{name: "pages, deleted out of order", put: span(1, 5*objPageSize), del: append(span(3*objPageSize, 5*objPageSize), span(1, 2*objPageSize)...)},
		{name: "long-lived object far behind", put: append([]uint64{3}, span(100*objPageSize, 101*objPageSize)...), del: span(100*objPageSize, 101*objPageSize)},
		{name: "delete missing", put: []uint64{5}, del: []uint64{6, 5, 5, 1 << 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			var tab objTable
			want := map[backend.ObjectID]*object{}
			for _, id := range tc.put {
				o := tab.add(backend.ObjectID(id))
				is.Equal(o.id, backend.ObjectID(id))
				want[o.id] = o
			}
			for _, id := range tc.del {
				o := tab.get(backend.ObjectID(id))
				tab.del(backend.ObjectID(id))
				delete(want, backend.ObjectID(id))
				if o != nil {
					is.True(o.id == 0 && o.val.Data == nil && o.err == nil && o.task == nil) // cleared: keeps no value
				}
			}
			is.Equal(tab.len(), len(want))
			for id, o := range want {
				is.True(tab.get(id) == o)
			}
			for _, id := range tc.del {
				is.True(tab.get(backend.ObjectID(id)) == nil)
			}
			all := tab.all()
			is.Equal(len(all), len(want))
			for i, o := range all {
				is.True(want[o.id] == o)
				if i > 0 {
					is.True(all[i-1].id < o.id) // in ID order
				}
			}
			pages := map[uint64]bool{}
			for id := range want {
				pages[uint64(id)>>objPageBits] = true
			}
			if len(tc.put) > 0 {
				pages[slices.Max(tc.put)>>objPageBits] = true // new IDs go there: it stays
			}
			is.Equal(len(tab.pages), len(pages)) // other empty pages are gone
		})
	}
}

// An object made, waited for and freed at a time, as a caller that waits
// for each call does, reuses the page its ID falls in: a page is
// allocated per objPageSize objects, not per object.
func TestObjTableOneAtATimeKeepsItsPage(t *testing.T) {
	is := is.New(t)
	var tab objTable
	id := backend.ObjectID(0)
	allocs := testing.AllocsPerRun(10*objPageSize, func() {
		id++
		tab.add(id)
		tab.del(id)
	})
	t.Logf("%.3f allocations per object", allocs)
	is.True(allocs < 0.2)
	is.Equal(tab.len(), 0)
	is.Equal(len(tab.pages), 1) // the current one
}

// span returns the IDs from lo to hi inclusive.
func span(lo, hi uint64) []uint64 {
	var out []uint64
	for id := lo; id <= hi; id++ {
		out = append(out, id)
	}
	return out
}
