package ray

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
)

// waitAllRecorder is a backend that records the WaitAll calls it gets
// (backend.AllWaiter) and passes them on.
type waitAllRecorder struct {
	*local.Backend
	mu    sync.Mutex
	calls [][]backend.ObjectID
}

func (b *waitAllRecorder) WaitAll(ctx context.Context, ids []backend.ObjectID) {
	b.mu.Lock()
	b.calls = append(b.calls, slices.Clone(ids))
	b.mu.Unlock()
	b.Backend.WaitAll(ctx, ids)
}

// TestGetAllWaitsForAllFirst: GetAll hands the backend's WaitAll the
// objects of its refs up to the first invalid one (a failed submission
// is reported by the Gets that follow, in order), only for two refs or
// more; its results are the Gets'.
func TestGetAllWaitsForAllFirst(t *testing.T) {
	is := is.New(t)
	lb, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 2}}}}, nil)
	is.NoErr(err)
	rec := &waitAllRecorder{Backend: lb}
	ctx := context.Background()
	c, err := NewCluster(ctx, rec, nil)
	is.NoErr(err)
	defer c.Close()
	refs := []ObjectRef[int]{Put(ctx, c, 1), Put(ctx, c, 2), Put(ctx, c, 3)}
	got, err := GetAll(ctx, refs)
	is.NoErr(err)
	is.Equal(got, []int{1, 2, 3})
	_, err = GetAll(ctx, refs[:1])
	is.NoErr(err)
	bad := errRef[int](c, backend.Errorf(backend.InvalidArgument, "submit task", "bad"))
	_, err = GetAll(ctx, []ObjectRef[int]{refs[0], refs[1], bad, refs[2]})
	is.Equal(CodeOf(err), InvalidArgument)
	_, err = GetAll(ctx, []ObjectRef[int]{refs[0], bad, refs[2]}) // one ref before it: no WaitAll
	is.Equal(CodeOf(err), InvalidArgument)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	ids := []backend.ObjectID{refs[0].ID(), refs[1].ID(), refs[2].ID()}
	is.Equal(rec.calls, [][]backend.ObjectID{ids, ids[:2]})
}
