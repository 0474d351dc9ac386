package cluster

import (
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// objTable is the object store's index from ID to object. IDs come from one
// counter, so the objects alive at a time sit in a few runs of nearby IDs:
// the table keeps pages of objPageSize consecutive IDs, found through a
// map, with the last page used kept at hand. A submission, Get and Free then
// touch a page array instead of a hash table that every submission grows
// and every Free shrinks (whose deletions lengthen probe sequences until
// the next rehash). A page goes when its last object does; the cost of a
// long-lived object is at most one page of pointers.
type objTable struct {
	pages map[uint64]*objPage
	last  *objPage // the page used last, or nil
	n     int      // objects in the table
}

const objPageBits = 6
const objPageSize = 1 << objPageBits

type objPage struct {
	base  uint64 // the page's number: ID >> objPageBits
	slots [objPageSize]*object
	live  int
}

func (t *objTable) page(id backend.ObjectID) *objPage {
	n := uint64(id) >> objPageBits
	if p := t.last; p != nil && p.base == n {
		return p
	}
	p := t.pages[n]
	if p != nil {
		t.last = p
	}
	return p
}

// get returns the object id, or nil.
func (t *objTable) get(id backend.ObjectID) *object {
	if p := t.page(id); p != nil {
		return p.slots[uint64(id)&(objPageSize-1)]
	}
	return nil
}

// put adds o under o.id.
func (t *objTable) put(o *object) {
	p := t.page(o.id)
	if p == nil {
		if t.pages == nil {
			t.pages = map[uint64]*objPage{}
		}
		p = &objPage{base: uint64(o.id) >> objPageBits}
		t.pages[p.base] = p
		t.last = p
	}
	s := &p.slots[uint64(o.id)&(objPageSize-1)]
	if *s == nil {
		p.live++
		t.n++
	}
	*s = o
}

// del removes id, and its page once empty.
func (t *objTable) del(id backend.ObjectID) {
	p := t.page(id)
	if p == nil {
		return
	}
	s := &p.slots[uint64(id)&(objPageSize-1)]
	if *s == nil {
		return
	}
	*s = nil
	p.live--
	t.n--
	if p.live == 0 {
		delete(t.pages, p.base)
		if t.last == p {
			t.last = nil
		}
	}
}

// len returns the number of objects.
func (t *objTable) len() int { return t.n }

// all returns every object, in ID order. The caller may delete while it
// ranges over the result.
func (t *objTable) all() []*object {
	var out []*object
	for _, n := range slices.Sorted(maps.Keys(t.pages)) {
		for _, o := range t.pages[n].slots {
			if o != nil {
				out = append(out, o)
			}
		}
	}
	return out
}
