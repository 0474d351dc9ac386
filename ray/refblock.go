package ray

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// refsPerBlock is how many refs share one block, and so one cleanup.
const refsPerBlock = 16

// A ref's state lives in a block of refsPerBlock states that share one
// runtime.AddCleanup: the last-resort Free of unreachable refs' objects
// runs when every ref of the block is unreachable, for all of them at once.
// A cleanup per ref cost about a tenth of a task's submission (the
// runtime's special-record lock and list, two allocations, and a cleanup
// run per ref); a block pays that once per 16 refs. The price: a dropped
// ref's object is freed only once the other refs of its block (made by the
// same cluster at about the same time, on the same P) are dropped too, so
// one long-lived ref can keep up to 15 dropped neighbours' objects. Release
// frees at once, as before.
type refBlock struct {
	states [refsPerBlock]refState
}

// refLedger is what a block's cleanup frees: the IDs of the block's refs
// that were not released. It is apart from the block, which the cleanup
// must not reach.
type refLedger struct {
	r   *reaper
	ids [refsPerBlock]atomic.Uint64 // 0: slot unused, or released
}

// refCursor hands out a block's states in order. Cursors sit in a
// per-cluster sync.Pool, so concurrent submitters (one per P) fill blocks
// of their own without sharing a lock.
type refCursor struct {
	block *refBlock
	led   *refLedger
	next  int
}

// refAllocator makes ref states for one cluster.
type refAllocator struct {
	reap    *reaper
	cursors sync.Pool
}

// newState returns a fresh state for a ref to object id.
func (a *refAllocator) newState(c *Cluster, id backend.ObjectID) *refState {
	cur, _ := a.cursors.Get().(*refCursor)
	if cur == nil {
		cur = new(refCursor)
		a.fresh(cur)
	}
	i := cur.next
	cur.next++
	s := &cur.block.states[i]
	s.c, s.id, s.led, s.slot = c, id, cur.led, uint8(i)
	cur.led.ids[i].Store(uint64(id))
	if cur.next == refsPerBlock {
		a.fresh(cur) // the cursor goes on with a new block
	}
	a.cursors.Put(cur)
	return s
}

// fresh points cur at a new block.
func (a *refAllocator) fresh(cur *refCursor) {
	cur.block, cur.led, cur.next = new(refBlock), &refLedger{r: a.reap}, 0
	runtime.AddCleanup(cur.block, freeBlock, cur.led)
}

// freeBlock is a block's cleanup: it queues the Free of the objects of its
// unreleased refs with the reaper, which calls the backend.
func freeBlock(led *refLedger) {
	var buf [refsPerBlock]backend.ObjectID
	ids := buf[:0]
	for i := range led.ids {
		if id := led.ids[i].Swap(0); id != 0 {
			ids = append(ids, backend.ObjectID(id))
		}
	}
	if len(ids) > 0 {
		led.r.free(ids...)
	}
}

// forget takes a released ref out of its block's cleanup.
func (s *refState) forget() {
	if s.led != nil {
		s.led.ids[s.slot].Store(0)
	}
}
