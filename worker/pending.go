package worker

// pendingTable holds a client's calls that await their reply, by call ID.
// IDs come from a counter, so the calls in flight at a time mostly lie in
// a window of consecutive IDs: a slot array indexed by the ID modulo its
// size holds them without hashing, and a call whose slot is taken (by a
// long call the window has moved past) goes to a map. The array doubles
// while it is more than half full, up to maxPendingSlots.
// ID 0 is never a call's (the counter starts at 1): it marks a free slot.
type pendingTable struct {
	slots []pendingSlot
	more  map[uint64]pendingCall
	n     int
}

type pendingSlot struct {
	id uint64
	p  pendingCall
}

const (
	minPendingSlots = 128
	maxPendingSlots = 4096
)

// len returns the number of calls held.
func (t *pendingTable) len() int { return t.n }

// put records the call id, which must not be held already.
func (t *pendingTable) put(id uint64, p pendingCall) {
	if 2*(t.n+1) > len(t.slots) && len(t.slots) < maxPendingSlots {
		t.grow()
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; s.id == 0 {
		s.id, s.p = id, p
	} else {
		if t.more == nil {
			t.more = map[uint64]pendingCall{}
		}
		t.more[id] = p
	}
	t.n++
}

// take removes the call id and returns it, if held.
func (t *pendingTable) take(id uint64) (pendingCall, bool) {
	if t.n == 0 || id == 0 {
		return pendingCall{}, false
	}
	if s := &t.slots[id&uint64(len(t.slots)-1)]; s.id == id {
		p := s.p
		*s = pendingSlot{}
		t.n--
		return p, true
	}
	p, ok := t.more[id]
	if ok {
		delete(t.more, id)
		t.n--
	}
	return p, ok
}

// grow doubles the slot array (to minPendingSlots at first) and moves the
// calls into it: those of the map too, where their slots are free.
func (t *pendingTable) grow() {
	size := 2 * len(t.slots)
	if size < minPendingSlots {
		size = minPendingSlots
	}
	old, more := t.slots, t.more
	t.slots, t.more, t.n = make([]pendingSlot, size), nil, 0
	for _, s := range old {
		if s.id != 0 {
			t.put(s.id, s.p)
		}
	}
	for id, p := range more {
		t.put(id, p)
	}
}

// takeAll removes every call and returns them.
func (t *pendingTable) takeAll() []pendingCall {
	all := make([]pendingCall, 0, t.n)
	for _, s := range t.slots {
		if s.id != 0 {
			all = append(all, s.p)
		}
	}
	for _, p := range t.more {
		all = append(all, p)
	}
	*t = pendingTable{}
	return all
}
