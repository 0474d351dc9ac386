package cluster

import (
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// objTable is the object store: objects by ID. IDs come from one counter,
// so the objects alive at a time sit in a few runs of nearby IDs: the table
// keeps pages of objPageSize consecutive IDs, found through a map, with the
// last page used kept at hand. A submission, Get and Free then touch a page
// array instead of a hash table that every submission grows and every Free
// shrinks (whose deletions lengthen probe sequences until the next rehash).
//
// The objects live in the pages by value: a task's result does not keep
// the task's record, which is garbage as soon as the task finishes, and one
// allocation holds 64 objects. A page goes when its last object does; the
// cost of a long-lived object is at most one page of objects (a deleted
// slot is cleared, so it keeps no value).
type objTable struct {
	pages map[uint64]*objPage
	last  *objPage // the page used last, or nil
	// cur is the page of the newest ID, which new objects go into: it
	// stays while empty (a caller that makes, waits for and frees one
	// object at a time would otherwise allocate a page per object), and
	// goes once the IDs have moved past it.
	cur *objPage
	n   int // objects in the table
}

const objPageBits = 6
const objPageSize = 1 << objPageBits

type objPage struct {
	base  uint64 // the page's number: ID >> objPageBits
	live  int
	slots [objPageSize]object // a free slot's id is 0
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
	if p := t.page(id); p != nil && id != 0 {
		if o := &p.slots[uint64(id)&(objPageSize-1)]; o.id == id {
			return o
		}
	}
	return nil
}

// add makes object id, which must not exist (IDs are never reused), and
// returns it. The object stays at that address until deleted.
func (t *objTable) add(id backend.ObjectID) *object {
	p := t.page(id)
	if p == nil {
		if t.pages == nil {
			t.pages = map[uint64]*objPage{}
		}
		if c := t.cur; c != nil && c.live == 0 {
			t.drop(c)
		}
		p = &objPage{base: uint64(id) >> objPageBits}
		t.pages[p.base] = p
		t.last, t.cur = p, p
	}
	o := &p.slots[uint64(id)&(objPageSize-1)]
	if o.id != 0 {
		panic("cluster: object " + id.String() + " made twice")
	}
	// The slot is zero (new, or cleared by del): setting the ID alone
	// spares the write barriers of assigning a whole object.
	p.live++
	t.n++
	o.id = id
	return o
}

// del removes id, and its page once empty. The slot is cleared: a pointer
// to the object that outlives it sees id 0, and no value is kept.
func (t *objTable) del(id backend.ObjectID) {
	p := t.page(id)
	if p == nil || id == 0 {
		return
	}
	o := &p.slots[uint64(id)&(objPageSize-1)]
	if o.id != id {
		return
	}
	*o = object{}
	p.live--
	t.n--
	if p.live == 0 && p != t.cur {
		t.drop(p)
	}
}

// drop removes the empty page p.
func (t *objTable) drop(p *objPage) {
	delete(t.pages, p.base)
	if t.last == p {
		t.last = nil
	}
	if t.cur == p {
		t.cur = nil
	}
}

// len returns the number of objects.
func (t *objTable) len() int { return t.n }

// all returns every object, in ID order. The caller may delete while it
// ranges over the result: a deleted object's id is then 0.
func (t *objTable) all() []*object {
	var out []*object
	for _, n := range slices.Sorted(maps.Keys(t.pages)) {
		p := t.pages[n]
		for i := range p.slots {
			if o := &p.slots[i]; o.id != 0 {
				out = append(out, o)
			}
		}
	}
	return out
}
