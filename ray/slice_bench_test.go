package ray_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
			c0 := cpuTime()
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
			// The process's CPU time per op, which time spent waiting for
			// a CPU on a loaded machine does not inflate.
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkSliceReserveReleaseFlat alternates, in each iteration, a
// reservation and release on a cluster of 64 hosts and one on a cluster of
// 8,192 hosts, and reports the ratio of their times (x-64-hosts), which
// must stay near 1: run one after the other, the two sizes see different
// loads of a shared machine, alternated the same; cpu-x-64-hosts is the
// ratio of the process's CPU time. Both clusters live in
// the one process, so the garbage collector's work on the larger heap is
// shared by both; BenchmarkSliceReserveRelease measures each size alone.
func BenchmarkSliceReserveReleaseFlat(b *testing.B) {
	ctx := context.Background()
	spec := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}
	var clusters [2]*ray.Cluster
	for i, hosts := range []int{64, 8192} {
		be, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: hosts / 4}}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		c, err := ray.NewCluster(ctx, be, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clusters[i] = c
	}
	var took, cpu [2]time.Duration
	b.ReportAllocs()
	for b.Loop() {
		for i, c := range clusters {
			t0, c0 := time.Now(), cpuTime()
			spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
			if err != nil {
				b.Fatal(err)
			}
			if err := spg.Release(ctx); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(t0)
			cpu[i] += cpuTime() - c0
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "64-hosts-ns")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(b.N), "8192-hosts-ns")
	b.ReportMetric(float64(took[1])/float64(took[0]), "x-64-hosts")
	if cpu[0] > 0 {
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-x-64-hosts")
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
