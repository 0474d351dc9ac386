package ray_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// BenchmarkSliceReserveRelease reserves and releases one v6e 4x4 slice (4
// hosts) on clusters of 64, 1,024 and 8,192 simulated TPU hosts. The cost
// must not grow with the cluster. The largest size is the largest power of two
// within the simulator's limit of local.MaxNodes (10,000) nodes.
func BenchmarkSliceReserveRelease(b *testing.B) {
	for _, hosts := range []int{64, 1024, 8192} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			be, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: hosts / 4}}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			c, err := ray.NewCluster(ctx, be, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			spec := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}
			b.ReportAllocs()
			for b.Loop() {
				spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
				if err != nil {
					b.Fatal(err)
				}
				if err := spg.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			rate(b, b.N, "reservations/s")
		})
	}
}

// BenchmarkSliceContention has 64 goroutines reserve and release slices of
// a cluster of 8 v6e 4x4 slices, and counts double bookings (a slice handed
// to a second holder while held), which must be 0.
func BenchmarkSliceContention(b *testing.B) {
	be, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 8}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, be, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	spec := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}
	var (
		held    sync.Map
		doubles atomic.Int64
		next    atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				spg := must(ray.NewSlicePlacementGroup(ctx, c, spec))
				name := spg.SliceNames()[0]
				if _, loaded := held.LoadOrStore(name, true); loaded {
					doubles.Add(1)
				}
				held.Delete(name)
				if err := spg.Release(ctx); err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
	rate(b, b.N, "reservations/s")
	b.ReportMetric(float64(doubles.Load()), "double-bookings")
}
