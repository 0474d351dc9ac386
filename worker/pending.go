package worker

import "iter"

// idTable holds values by request ID: a client's calls that await their
// reply (pendingTable), a server connection's running work. IDs come from
// a counter (the client's), so the IDs in use at a time mostly lie in a
// window of consecutive IDs: a slot array indexed by the ID modulo its
// size holds them without hashing, and an ID whose slot is taken (by a
// long call the window has moved past) goes to a map, as does ID 0 (a
// client never uses it; a free slot's ID is 0). The array doubles while
// it is more than half full, up to maxPendingSlots.
type idTable[V any] struct {
	slots []idSlot[V]
	more  map[uint64]V
	n     int
}

type idSlot[V any] struct {
	id uint64
	v  V
}

// pendingTable holds a client's calls that await their reply, by call ID.
type pendingTable = idTable[pendingCall]

const (
	minPendingSlots = 128
	maxPendingSlots = 4096
)

// len returns the number of IDs held.
func (t *idTable[V]) len() int { return t.n }

// put records v for id, which must not be held already.
func (t *idTable[V]) put(id uint64, v V) {
	if 2*(t.n+1) > len(t.slots) && len(t.slots) < maxPendingSlots {
		t.grow()
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; s.id == 0 && id != 0 {
		s.id, s.v = id, v
	} else {
		if t.more == nil {
			t.more = map[uint64]V{}
		}
		t.more[id] = v
	}
	t.n++
}

// get returns the value of id, if held.
func (t *idTable[V]) get(id uint64) (V, bool) {
	if t.n > 0 && id != 0 {
		if s := &t.slots[id&uint64(len(t.slots)-1)]; s.id == id {
			return s.v, true
		}
	}
	v, ok := t.more[id]
	return v, ok
}

// take removes id and returns its value, if held.
func (t *idTable[V]) take(id uint64) (V, bool) {
	if t.n == 0 {
		var zero V
		return zero, false
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; s.id == id && id != 0 {
		v := s.v
		*s = idSlot[V]{}
		t.n--
		return v, true
	}
	v, ok := t.more[id]
	if ok {
		delete(t.more, id)
		t.n--
	}
	return v, ok
}

// grow doubles the slot array (to minPendingSlots at first) and moves the
// values into it: those of the map too, where their slots are free.
func (t *idTable[V]) grow() {
	size := 2 * len(t.slots)
	if size < minPendingSlots {
		size = minPendingSlots
	}
	old, more := t.slots, t.more
	t.slots, t.more, t.n = make([]idSlot[V], size), nil, 0
	for _, s := range old {
		if s.id != 0 {
			t.put(s.id, s.v)
		}
	}
	for id, v := range more {
		t.put(id, v)
	}
}

// values yields every value held, in no particular order. The table must
// not change during the iteration.
func (t *idTable[V]) values() iter.Seq[V] {
	return func(yield func(V) bool) {
		if t.n == 0 {
			return
		}
		for i := range t.slots {
			if s := &t.slots[i]; s.id != 0 && !yield(s.v) {
				return
			}
		}
		for _, v := range t.more {
			if !yield(v) {
				return
			}
		}
	}
}

// takeAll removes every value and returns them.
func (t *idTable[V]) takeAll() []V {
	all := make([]V, 0, t.n)
	for v := range t.values() {
		all = append(all, v)
	}
	*t = idTable[V]{}
	return all
}
