package ray

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
)

// freeRecorder is a backend that records every ID passed to Free.
type freeRecorder struct {
	backend.Backend
	mu    sync.Mutex
	freed []backend.ObjectID
}

func (b *freeRecorder) Free(ids ...backend.ObjectID) {
	b.mu.Lock()
	b.freed = append(b.freed, ids...)
	b.mu.Unlock()
	b.Backend.Free(ids...)
}

func (b *freeRecorder) snapshot() []backend.ObjectID {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.freed)
}

// TestDroppedRefsAreFreed checks the last-resort Free of refs that share a
// block's cleanup (refblock.go): every dropped ref's object is freed
// exactly once, a released ref's once by Release and never again by the
// cleanup, whatever the number of refs relative to the block size.
func TestDroppedRefsAreFreed(t *testing.T) {
	for _, n := range []int{1, refsPerBlock - 1, refsPerBlock, 3*refsPerBlock + 5} {
		t.Run(fmt.Sprintf("refs=%d", n), func(t *testing.T) {
			is := is.New(t)
			lb, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 1}}}}, nil)
			is.NoErr(err)
			rec := &freeRecorder{Backend: lb}
			ctx := context.Background()
			c, err := NewCluster(ctx, rec, nil)
			is.NoErr(err)
			defer c.Close()

			want := make([]backend.ObjectID, 0, n)
			func() {
				refs := make([]ObjectRef[int], n)
				for i := range refs {
					refs[i] = Put(ctx, c, i)
					is.NoErr(refs[i].Err())
					want = append(want, refs[i].ID())
				}
				refs[0].Release()
				is.Equal(rec.snapshot(), want[:1]) // Release frees at once
			}()
			// The refs are unreachable now; collect until their
			// cleanups have run. The deadline is a failure detector.
			deadline := time.Now().Add(20 * time.Second)
			for len(rec.snapshot()) < n && time.Now().Before(deadline) {
				runtime.GC()
				runtime.Gosched()
			}
			c.Close() // waits for queued Frees
			got := rec.snapshot()
			slices.Sort(got)
			is.Equal(got, want) // each object freed once, none twice
		})
	}
}

// TestRefBlockSize: a block of ref states fits the 768-byte size class (a
// state is 48 bytes; a field out of place made it 56, and the block 896).
func TestRefBlockSize(t *testing.T) {
	is := is.New(t)
	is.True(unsafe.Sizeof(refBlock{}) <= 768)
}
