package ray

import (
	"context"
	"log/slog"
	"sync"

	"github.com/goray-dev/goray/backend"
)

// reaper does the work of the cleanups that package runtime runs for
// unreachable values — Free of a dropped ref's object, release of a slice
// reservation nobody released — on a goroutine of its own. The Go runtime
// runs cleanups on a few shared goroutines (see runtime.AddCleanup: "if a
// cleanup function must run for a long time, it should create a new
// goroutine"), so a cleanup that called a backend, which may take a lock
// held for long or make a network call, could stall every other cleanup in
// the program. A cleanup only appends to the reaper's queue under a short
// lock; one drainer goroutine, started when work arrives and gone when the
// queue is empty, calls the backend, batching Frees into one call.
type reaper struct {
	b   backend.Backend
	log *slog.Logger

	mu      sync.Mutex
	frees   []backend.ObjectID
	groups  []backend.PlacementGroupID
	spare   []backend.ObjectID // the drained batch, reused
	running bool               // a drainer goroutine is live
	closed  bool               // the cluster is closed: drop new work
	wg      sync.WaitGroup     // the drainer
}

// free queues a Free of ids. It never blocks on the backend.
func (r *reaper) free(ids ...backend.ObjectID) {
	r.mu.Lock()
	if !r.closed {
		r.frees = append(r.frees, ids...)
	}
	r.kickLocked()
}

// release queues the removal of an unreachable slice reservation's group.
// It never blocks on the backend.
func (r *reaper) release(id backend.PlacementGroupID) {
	r.mu.Lock()
	if !r.closed {
		r.groups = append(r.groups, id)
	}
	r.kickLocked()
}

// kickLocked starts the drainer if none is live, and unlocks r.mu.
func (r *reaper) kickLocked() {
	start := !r.running && !r.closed
	if start {
		r.running = true
		r.wg.Add(1)
	}
	r.mu.Unlock()
	if start {
		go r.drain()
	}
}

// drain calls the backend for queued work until the queue is empty.
func (r *reaper) drain() {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		if len(r.frees) == 0 && len(r.groups) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		frees, groups := r.frees, r.groups
		r.frees, r.groups, r.spare = r.spare[:0], nil, nil
		r.mu.Unlock()
		if len(frees) > 0 {
			r.b.Free(frees...)
		}
		for _, id := range groups {
			r.log.Warn("goray: TPU slice reservation was not released; releasing it now", "group", id)
			r.b.RemovePlacementGroup(context.Background(), id) //nolint:errcheck // best effort: nobody is left to tell
		}
		r.mu.Lock()
		r.spare = frees[:0]
		r.mu.Unlock()
	}
}

// close waits for queued work to be done and drops work queued later.
func (r *reaper) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}
