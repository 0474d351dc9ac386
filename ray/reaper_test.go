package ray

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// stuckBackend is a backend whose Free and RemovePlacementGroup block until
// unblock is closed, as a networked backend's might, recording what they got.
type stuckBackend struct {
	backend.Backend
	entered chan struct{} // receives once per blocked call
	unblock chan struct{}

	mu      sync.Mutex
	freed   []backend.ObjectID
	removed []backend.PlacementGroupID
}

func (b *stuckBackend) Free(ids ...backend.ObjectID) {
	b.entered <- struct{}{}
	<-b.unblock
	b.mu.Lock()
	b.freed = append(b.freed, ids...)
	b.mu.Unlock()
}

func (b *stuckBackend) RemovePlacementGroup(_ context.Context, id backend.PlacementGroupID) error {
	b.mu.Lock()
	b.removed = append(b.removed, id)
	b.mu.Unlock()
	return nil
}

// TestReaperNeverBlocksCleanups checks that the work the runtime's cleanups
// hand to the reaper never runs on the caller: with the backend's Free
// stuck, queueing more Frees and a slice release still returns, and all of
// it reaches the backend once Free returns.
func TestReaperNeverBlocksCleanups(t *testing.T) {
	is := is.New(t)
	b := &stuckBackend{entered: make(chan struct{}, 16), unblock: make(chan struct{})}
	r := &reaper{b: b, log: slog.New(slog.DiscardHandler)}
	r.free(1)
	<-b.entered // the drainer is stuck in Free(1)

	returned := make(chan struct{})
	go func() {
		r.free(2)
		r.free(3)
		r.release(9)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second): // a failure detector, not synchronisation
		t.Fatal("queueing a Free blocked on the backend's stuck Free")
	}
	close(b.unblock)
	r.close()                                      // waits for the queue to drain
	is.Equal(b.freed, []backend.ObjectID{1, 2, 3}) // 2 and 3 in one batch
	is.Equal(b.removed, []backend.PlacementGroupID{9})

	r.free(4) // after close: dropped, no goroutine started
	r.close()
	is.Equal(len(b.freed), 3)
}
