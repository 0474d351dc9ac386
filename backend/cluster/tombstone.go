package cluster

import (
	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// TombstoneWindow is how many dead actors and how many removed placement
// groups the runtime remembers the cause of. Calls naming one of the last
// TombstoneWindow dead actors (removed groups) get the error they died with;
// older ones, which the backend issued but no longer remembers, still get
// the right code (ActorDied; FailedPrecondition with
// ErrPlacementGroupRemoved) with a message saying the cause is no longer
// kept. IDs the backend never issued are NotFound. This bounds the memory
// a long-running driver spends on the dead.
const TombstoneWindow = 10_000

// tombstones remembers the errors of the last limit IDs added, in a ring.
type tombstones[K ~uint64] struct {
	m     map[K]error
	ring  []K
	next  int
	limit int
}

func newTombstones[K ~uint64](limit int) *tombstones[K] {
	return &tombstones[K]{m: map[K]error{}, limit: limit}
}

// add remembers id's error, forgetting the oldest past the limit.
func (t *tombstones[K]) add(id K, err error) {
	if _, ok := t.m[id]; ok {
		t.m[id] = err
		return
	}
	if len(t.ring) < t.limit {
		t.ring = append(t.ring, id)
	} else {
		delete(t.m, t.ring[t.next])
		t.ring[t.next] = id
		t.next = (t.next + 1) % t.limit
	}
	t.m[id] = err
}

func (t *tombstones[K]) get(id K) (error, bool) {
	err, ok := t.m[id]
	return err, ok
}

// deadActor returns why the actor id, which is not live, died: its
// tombstone, or for an ID the backend issued long ago an ActorDied error
// without the cause. ok is false for an ID never issued. b.mu must be held.
func (rt *Runtime) deadActor(id backend.ActorID) (err error, ok bool) {
	if err, ok := rt.deadActors.get(id); ok {
		return err, true
	}
	if id != 0 && uint64(id) <= rt.nextID {
		return backend.Errorf(backend.ActorDied, "actor "+id.String(), "actor is dead (it died long ago; its cause is no longer kept)"), true
	}
	return nil, false
}

// removedPG returns the error of work pinned to the group id, which is not
// live: its tombstone, or for an ID the backend issued long ago the removal
// error. ok is false for an ID never issued. b.mu must be held.
func (rt *Runtime) removedPG(id backend.PlacementGroupID) (err error, ok bool) {
	if err, ok := rt.removedPGs.get(id); ok {
		if err == nil {
			err = admission.PlacementGroupRemovedError(id)
		}
		return err, true
	}
	if id != 0 && uint64(id) <= rt.nextID {
		return admission.PlacementGroupRemovedError(id), true
	}
	return nil, false
}
