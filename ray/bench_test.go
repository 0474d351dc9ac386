package ray_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// The benchmarks reproduce the workloads of Ray's `ray microbenchmark`
// (python/ray/_private/ray_perf.py): a no-op task returning "ok", a 0-CPU
// actor whose method returns "ok". Each reports its rate in Ray's unit.
// BenchmarkBaseline* measure bare goroutines in the same run, for ratios.
// Reproduce: see docs/benchmarks.md.

var benchNoop = ray.NewTask("bench.noop", func(ctx context.Context, _ struct{}) (string, error) { return "ok", nil })

type benchActor struct{}

var benchActorClass = ray.NewActorClass("bench.actor", func(ctx context.Context, _ struct{}) (*benchActor, error) { return &benchActor{}, nil })
var benchActorNoop = ray.NewMethod(benchActorClass, "noop", func(ctx context.Context, a *benchActor, _ struct{}) (string, error) { return "ok", nil })

// benchCluster is one node with the 64 CPUs of the host Ray's published
// numbers come from.
func benchCluster(b *testing.B, opts *ray.Options) *ray.Cluster {
	b.Helper()
	be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "head", Resources: backend.Resources{backend.CPU: 64, backend.Memory: 256 << 30}}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), be, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func codecModes(b *testing.B, f func(b *testing.B, opts *ray.Options)) {
	b.Run("codec=json", func(b *testing.B) { f(b, nil) })
	b.Run("codec=off", func(b *testing.B) { f(b, &ray.Options{DisableCodec: true}) })
}

func rate(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), unit)
}

// must panics on error: benchmark loops call it from several goroutines,
// where b.Fatal may not be used.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func BenchmarkSingleClientTasksSync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		b.ReportAllocs()
		for b.Loop() {
			must(benchNoop.Remote(ctx, c, struct{}{}).Get(ctx))
		}
		rate(b, b.N, "tasks/s")
	})
}

func BenchmarkSingleClientTasksAsync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		refs := make([]ray.ObjectRef[string], 1000)
		b.ReportAllocs()
		for b.Loop() {
			for i := range refs {
				refs[i] = benchNoop.Remote(ctx, c, struct{}{})
			}
			must(ray.GetAll(ctx, refs))
		}
		rate(b, b.N*len(refs), "tasks/s")
	})
}

func BenchmarkMultiClientTasksAsync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		const clients, batch = 4, 1000
		b.ReportAllocs()
		for b.Loop() {
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					refs := make([]ray.ObjectRef[string], batch)
					for i := range refs {
						refs[i] = benchNoop.Remote(ctx, c, struct{}{})
					}
					must(ray.GetAll(ctx, refs))
				})
			}
			wg.Wait()
		}
		rate(b, b.N*clients*batch, "tasks/s")
	})
}

func BenchmarkActorCallsSync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		h := benchActorClass.Remote(ctx, c, struct{}{})
		if err := h.Ready(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			must(benchActorNoop.Remote(ctx, h, struct{}{}).Get(ctx))
		}
		rate(b, b.N, "calls/s")
	})
}

func actorAsync(b *testing.B, opts *ray.Options, actorOpts ...ray.ActorOption) {
	c, ctx := benchCluster(b, opts), context.Background()
	h := benchActorClass.Remote(ctx, c, struct{}{}, actorOpts...)
	if err := h.Ready(ctx); err != nil {
		b.Fatal(err)
	}
	refs := make([]ray.ObjectRef[string], 1000)
	b.ReportAllocs()
	for b.Loop() {
		for i := range refs {
			refs[i] = benchActorNoop.Remote(ctx, h, struct{}{})
		}
		must(ray.GetAll(ctx, refs))
	}
	rate(b, b.N*len(refs), "calls/s")
}

func BenchmarkActorCallsAsync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) { actorAsync(b, opts) })
}

func BenchmarkActorCallsConcurrent(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) { actorAsync(b, opts, ray.MaxConcurrency(16)) })
}

func BenchmarkNNActorCallsAsync(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		nActors := max(1, runtime.NumCPU()/2)
		const callers, perCaller = 4, 5000
		actors := make([]*ray.ActorHandle[*benchActor], nActors)
		for i := range actors {
			actors[i] = benchActorClass.Remote(ctx, c, struct{}{})
			if err := actors[i].Ready(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			var wg sync.WaitGroup
			for k := range callers {
				wg.Go(func() {
					refs := make([]ray.ObjectRef[string], perCaller)
					for i := range refs {
						refs[i] = benchActorNoop.Remote(ctx, actors[(i+k)%nActors], struct{}{})
					}
					must(ray.GetAll(ctx, refs))
				})
			}
			wg.Wait()
		}
		rate(b, b.N*callers*perCaller, "calls/s")
	})
}

func BenchmarkPutSmall(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := ray.Put(ctx, c, 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
		rate(b, b.N, "puts/s")
	})
}

func BenchmarkGetSmall(b *testing.B) {
	codecModes(b, func(b *testing.B, opts *ray.Options) {
		c, ctx := benchCluster(b, opts), context.Background()
		ref := ray.Put(ctx, c, 0)
		b.ReportAllocs()
		for b.Loop() {
			must(ref.Get(ctx))
		}
		rate(b, b.N, "gets/s")
	})
}

func BenchmarkPlacementGroupCreateRemoval(b *testing.B) {
	c, ctx := benchCluster(b, nil), context.Background()
	pgs := make([]*ray.PlacementGroup, 100)
	spec := ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.CPU: 0.01}}}}
	b.ReportAllocs()
	for b.Loop() {
		for i := range pgs {
			pgs[i] = must(ray.NewPlacementGroup(ctx, c, spec))
		}
		for _, pg := range pgs {
			if err := pg.Ready(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for _, pg := range pgs {
			if err := pg.Remove(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	rate(b, b.N*len(pgs), "PGs/s")
}

// BenchmarkBaselineGoroutineSync is the floor of a synchronous task round
// trip: spawn a goroutine that returns "ok" and wait for it.
func BenchmarkBaselineGoroutineSync(b *testing.B) {
	var out string
	for b.Loop() {
		var wg sync.WaitGroup
		wg.Go(func() { out = "ok" })
		wg.Wait()
	}
	_ = out
	rate(b, b.N, "tasks/s")
}

// BenchmarkBaselineGoroutineAsync spawns 1000 goroutines, then waits for
// all, the bare-Go floor of single_client_tasks_async.
func BenchmarkBaselineGoroutineAsync(b *testing.B) {
	outs := make([]string, 1000)
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() { outs[i] = "ok" })
		}
		wg.Wait()
	}
	rate(b, b.N*len(outs), "tasks/s")
}

// BenchmarkTasksVsGoroutines alternates a task workload (codec=json) with
// its bare-goroutine baseline, a block of each per iteration, and reports
// their ratio (x-goroutine) besides each one's time per task: run one
// after the other, two benchmarks see different loads of a shared
// machine, alternated the same. cpu-x-goroutine is the ratio of the
// process's CPU time (getrusage) over the blocks, which time spent
// waiting for a CPU does not inflate. sync is a task round trip against
// spawning a goroutine and waiting for it (blocks of 100); async is 1000
// tasks submitted then Get against 1000 goroutines spawned then waited
// for.
func BenchmarkTasksVsGoroutines(b *testing.B) {
	b.Run("mode=sync", func(b *testing.B) {
		c, ctx := benchCluster(b, nil), context.Background()
		var out string
		const block = 100
		vsLoop(b, block, func() {
			for range block {
				var wg sync.WaitGroup
				wg.Go(func() { out = "ok" })
				wg.Wait()
			}
		}, func() {
			for range block {
				if _, err := benchNoop.Remote(ctx, c, struct{}{}).Get(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		_ = out
	})
	b.Run("mode=async", func(b *testing.B) {
		c, ctx := benchCluster(b, nil), context.Background()
		refs := make([]ray.ObjectRef[string], 1000)
		outs := make([]string, len(refs))
		vsLoop(b, len(refs), func() {
			var wg sync.WaitGroup
			for i := range outs {
				wg.Go(func() { outs[i] = "ok" })
			}
			wg.Wait()
		}, func() {
			for i := range refs {
				refs[i] = benchNoop.Remote(ctx, c, struct{}{})
			}
			if _, err := ray.GetAll(ctx, refs); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// vsLoop runs baseline and work alternately, each doing per operations,
// and reports their times per operation and ratios, by the clock and by
// the process's CPU time.
func vsLoop(b *testing.B, per int, baseline, work func()) {
	var wall, cpu [2]time.Duration
	for b.Loop() {
		for i, f := range []func(){baseline, work} {
			t0, c0 := time.Now(), cpuTime()
			f()
			wall[i] += time.Since(t0)
			cpu[i] += cpuTime() - c0
		}
	}
	n := float64(b.N * per)
	b.ReportMetric(float64(wall[1].Nanoseconds())/n, "task-ns")
	b.ReportMetric(float64(wall[0].Nanoseconds())/n, "goroutine-ns")
	b.ReportMetric(float64(wall[1])/float64(wall[0]), "x-goroutine")
	if cpu[0] > 0 {
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-x-goroutine")
	}
}
