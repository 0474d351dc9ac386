//go:build !race

package local_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var (
	memNop   = ray.NewTask("localtest.memNop", func(ctx context.Context, x int) (int, error) { return x, nil })
	memActor = ray.NewActorClass("localtest.memActor", func(ctx context.Context, _ int) (*struct{}, error) { return &struct{}{}, nil })
)

// TestMemoryBounded: a long-running driver's heap does not grow with the
// number of distinct task shapes, dead actors or removed placement groups
// it has seen. It submits 1,000,000 tasks of distinct shapes (resources
// and selectors), and creates and releases 100,000 actors and 100,000
// placement groups (all the shapes also rejected once), and checks that the
// heap after the last tenth is within 16 MiB of the heap after the first.
// It takes about a minute, so it runs only with GORAY_LONG_TESTS=1 (as
// .ci/run sets it), and the race detector's build leaves it out.
func TestMemoryBounded(t *testing.T) {
	if os.Getenv("GORAY_LONG_TESTS") == "" {
		t.Skip("skipped: about a minute, it measures the heap across 1,000,000 tasks; run with GORAY_LONG_TESTS=1 (.ci/run does)")
	}
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{
		{Name: "cpu", Count: 4, Resources: backend.Resources{backend.CPU: 64, "x": 1000}, Labels: map[string]string{"zone": "a"}},
	}}, nil)
	is.NoErr(err)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, &ray.Options{DisableCodec: true})
	is.NoErr(err)
	defer c.Close()

	const (
		tasks, actors, groups = 1_000_000, 100_000, 100_000
		rounds                = 10
		batch                 = 1000
	)
	round := func(r int) {
		t.Helper()
		for i := r * tasks / rounds; i < (r+1)*tasks/rounds; i += batch {
			refs := make([]ray.ObjectRef[int], 0, batch)
			for j := i; j < i+batch; j++ {
				// A distinct class per task: its amount of "x" and a
				// selector that matches every node.
				refs = append(refs, memNop.Remote(ctx, c, j,
					ray.Resources{ray.CPU: 0, "x": float64(j%900_000+1) * backend.Granularity},
					ray.NodeSelector{"zone": "!z" + strconv.Itoa(j)}))
			}
			if _, err := ray.GetAll(ctx, refs); err != nil {
				t.Fatal(err)
			}
			for _, r := range refs {
				r.Release()
			}
			// A rejected shape leaves nothing behind either.
			memNop.Remote(ctx, c, i, ray.Resources{"y" + strconv.Itoa(i): 1}).Release()
		}
		for i := range actors / rounds {
			h := memActor.Remote(ctx, c, i, ray.Resources{"x": float64(i+1) * backend.Granularity})
			if err := h.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			if err := h.Kill(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i := range groups / rounds {
			pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}}})
			if err != nil {
				t.Fatal(err)
			}
			// Pinned work gives the group a scheduling class of its own.
			if _, err := memNop.Remote(ctx, c, i, ray.InBundle(pg, 0), ray.Resources{ray.CPU: 0}).Get(ctx); err != nil {
				t.Fatal(err)
			}
			if err := pg.Remove(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	round(0)
	first := heap()
	for r := 1; r < rounds; r++ {
		round(r)
	}
	last := heap()
	t.Logf("heap after the first tenth: %.1f MiB, after all: %.1f MiB", float64(first)/(1<<20), float64(last)/(1<<20))
	is.True(last < first+16<<20) // the heap stays flat
}
