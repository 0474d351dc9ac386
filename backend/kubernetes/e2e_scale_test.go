//go:build e2e

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// BenchmarkE2EScale measures discovery and slice claims while the fleet
// grows from 16 to 512 to 5,000 kwok TPU nodes, on one control plane in
// one run, with 8 drivers claiming and releasing at once.
//
// Each driver is what kubernetes.New builds, less the pod runner: its own
// client and connection (as the RBAC identity of deploy/, with
// client-side limits 20 times the backend's defaults, so that the API
// server bounds the claims), its own holder identity, the Source (one
// Node informer) with its Leases, in the shared runtime (cluster.New),
// behind a ray.Cluster. kwok nodes run nothing, so its runner starts no
// pods: a claim is what ray.NewSlicePlacementGroup does up to the pods
// (the runtime picks a free slice from its index, the Source claims its
// Lease, refused while another driver holds it or heads the shape's
// queue), and Release deletes the Lease.
//
// The fleet: 16 single-host v6e 2x4 slices, then a mix of multi-host
// slices (v6e 4x4, 8x8 and 16x16, v5p 2x2x4 and 4x4x4: 4 to 64 hosts
// each). Per size, with fresh drivers, three claim loops: one driver
// alone claiming v6e 2x4 slices (a claim without contention), the 8
// claiming them (the same 16 slices at every size, so the same
// contention: only what every driver watches and indexes grows), and the
// 8 claiming v6e 4x4 slices (20 at 512 nodes, 120 at 5,000).
//
// discovery-ms is the time from building a driver alone to its cluster
// listing every slice, discovery-calls its API requests meanwhile,
// discovery8-ms the slowest of the other 7 started together, newslice-ms
// the time until all 8 have reported a slice added while they run;
// heap-MiB/driver is the heap in use (after GC) that the first driver
// added, heap8-MiB/driver that of all 8 over 8. In a claim loop each
// iteration is one claim by whichever driver is free: claims/s, p50-ms
// and p99-ms of ray.NewSlicePlacementGroup, the drivers' HTTP requests
// per claim (its release included) in all and by verb, ClaimSlices
// attempts per claim (each refusal costs one more), the time client-side
// rate limits made requests wait, and the test process's CPU per claim.
// Every claim is checked against a shared ledger and its Lease's holder;
// once the drivers have closed no Lease is left and no goroutine of
// theirs. A table at the end gives each size's figures and the largest
// size's over the smallest's.
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2EScale -benchtime 400x -timeout 30m ./
//
// -count repeats each claim loop with the same drivers; discovery and
// heap are measured once per size and run of the benchmark.
// GORAY_E2E_SCALE_MAX_NODES=512 stops after the sizes up to 512 nodes;
// GORAY_E2E_SCALE_HEAP_PROFILE=<path> writes a heap profile per size
// (<path>.<slices>) once the 8 drivers have started.
func BenchmarkE2EScale(b *testing.B) {
	cp := startHarnessB(b)
	ctx := context.Background()
	admin := cp.Client()
	driverRC := driverConfig(b, cp)
	maxNodes := 5000
	if v := os.Getenv("GORAY_E2E_SCALE_MAX_NODES"); v != "" {
		var err error
		if maxNodes, err = strconv.Atoi(v); err != nil {
			b.Fatalf("GORAY_E2E_SCALE_MAX_NODES=%q: %v", v, err)
		}
	}
	var steps []scaleStep
	for _, st := range scaleFleet() {
		if st.nodes <= maxNodes {
			steps = append(steps, st)
		}
	}
	var results []*scaleResult
	total := 0
	for _, step := range steps {
		t0 := time.Now()
		added, err := addPools(ctx, cp, step.pools)
		if err != nil {
			b.Fatal(err)
		}
		total += added
		if total != step.nodes {
			b.Fatalf("the fleet has %d nodes, want %d", total, step.nodes)
		}
		create := time.Since(t0)
		b.Run(fmt.Sprintf("nodes=%d", total), func(b *testing.B) {
			leaks := goleak.IgnoreCurrent()
			drivers, disc := startScaleDrivers(b, driverRC, step.slices)
			disc.nodes, disc.slices, disc.added, disc.create = total, step.slices, added, create
			probe := fmt.Sprintf("probe-%d", total)
			disc.newSlice = watchNewSlice(b, cp, drivers, probe)
			for _, c := range scaleClaims {
				if step.shapes[c.spec.Topology] == 0 {
					continue
				}
				b.Run(fmt.Sprintf("claim=%s-%s/drivers=%d", c.spec.AcceleratorVersion, c.spec.Topology, c.drivers), func(b *testing.B) {
					r := *disc
					r.claim, r.drivers = c.spec.Topology, c.drivers
					runScaleClaims(b, admin, drivers[:c.drivers], c.spec, &r)
					results = append(results, &r)
				})
			}
			for _, d := range drivers {
				d.close()
			}
			// The probe slice goes, so that the next drivers find the
			// fleet's slices only.
			if err := admin.CoreV1().Nodes().Delete(ctx, probe+"-0", metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			// Every Lease is gone once the drivers have closed (Close waits
			// for the releases), and so is every goroutine they started.
			list, err := admin.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, l := range list.Items {
				if strings.HasPrefix(l.Name, "goray-") {
					b.Errorf("Lease %s left (holder %s)", l.Name, deref(l.Spec.HolderIdentity))
				}
			}
			// An HTTP/2 connection's read loop belongs to its client's
			// pool, which the harness's clients share; the drivers close
			// their idle connections.
			if err := goleak.Find(leaks, goleak.IgnoreTopFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
				goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop")); err != nil {
				b.Errorf("goroutines left after the drivers closed: %v", err)
			}
		})
	}
	// Printed, not logged: without -v a benchmark with sub-benchmarks
	// prints no log, and a leaf's log is cut to 10 lines.
	fmt.Print(scaleSummary(results))
}

// scaleDrivers is how many drivers claim at once.
const scaleDrivers = 8

// scaleClaims are the claim loops of each size, in turn: one driver alone
// (what a claim costs without contention), then all 8, claiming the 16
// single-host v6e 2x4 slices present at every size; then the 8 claiming
// v6e 4x4 slices, of which there are 20 at 512 nodes and 120 at 5,000,
// to see claims among more slices of their shape.
var scaleClaims = []struct {
	spec    ray.SliceSpec
	drivers int
}{
	{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", Timeout: time.Minute}, 1},
	{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", Timeout: time.Minute}, scaleDrivers},
	{ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", Timeout: time.Minute}, scaleDrivers},
}

type scaleStep struct {
	nodes, slices int // the fleet's once the step's pools are added
	pools         []kubeharness.NodePool
	shapes        map[string]int // the fleet's slices by topology (v6e)
}

// scaleFleet is the fleet, step by step: the slices claimed at every size,
// then two additions of multi-host slices of several shapes.
func scaleFleet() []scaleStep {
	var claim []kubeharness.NodePool
	for i := range 16 {
		claim = append(claim, kubeharness.NodePool{Name: fmt.Sprintf("claim-%d", i), Generation: "v6e", Topology: "2x4", Kwok: true})
	}
	pools := func(prefix string, kinds ...any) []kubeharness.NodePool {
		var out []kubeharness.NodePool
		for k := 0; k < len(kinds); k += 3 {
			gen, topo, n := kinds[k].(string), kinds[k+1].(string), kinds[k+2].(int)
			for i := range n {
				name := fmt.Sprintf("%s-%s-%s-%d", prefix, gen, topo, i)
				out = append(out, kubeharness.NodePool{Name: name, Generation: gen, Topology: topo, Kwok: true})
			}
		}
		return out
	}
	// 4 × 64 + 10 × 16 + 20 × 4 = 496 hosts; then 40 × 64 + 50 × 16 +
	// 30 × 16 + 100 × 4 + 62 × 4 = 4,488.
	mid := pools("m", "v6e", "16x16", 4, "v6e", "8x8", 10, "v6e", "4x4", 20)
	big := pools("l", "v6e", "16x16", 40, "v6e", "8x8", 50, "v5p", "4x4x4", 30, "v6e", "4x4", 100, "v5p", "2x2x4", 62)
	return []scaleStep{
		{nodes: 16, slices: 16, pools: claim, shapes: map[string]int{"2x4": 16}},
		{nodes: 512, slices: 16 + len(mid), pools: mid, shapes: map[string]int{"2x4": 16, "4x4": 20}},
		{nodes: 5000, slices: 16 + len(mid) + len(big), pools: big, shapes: map[string]int{"2x4": 16, "4x4": 120}},
	}
}

// addPools creates the pools' nodes, 8 pools at a time (each 32 nodes at
// a time), and returns how many it created.
func addPools(ctx context.Context, cp *kubeharness.ControlPlane, pools []kubeharness.NodePool) (int, error) {
	var n atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, p := range pools {
		g.Go(func() error {
			nodes, err := cp.AddTPUNodePool(gctx, p)
			n.Add(int64(len(nodes)))
			return err
		})
	}
	err := g.Wait()
	return int(n.Load()), err
}

// scaleResult is the figures of one claimed shape at one fleet size.
type scaleResult struct {
	nodes, slices          int
	claim                  string        // the claimed topology
	drivers                int           // how many claim at once
	added                  int           // nodes the step created
	create                 time.Duration // creating them
	discovery, discovery8  time.Duration
	discoveryCalls         int64         // the first driver's requests until it listed every slice
	newSlice               time.Duration // until every running driver listed a new slice
	heap, heap8            float64       // MiB per driver
	claims                 int
	claimsPerSec, p50, p99 float64
	maxLatency             float64
	calls, attempts, wait  float64 // per claim
	cpu                    float64 // ms of the test process's CPU per claim
	heldRefusals           float64 // per claim
	byVerb                 map[string]float64
}

// startScaleDrivers starts the first driver alone, then the 7 others at
// once, and measures their discovery and heap.
func startScaleDrivers(b *testing.B, driverRC *rest.Config, slices int) ([]*scaleDriver, *scaleResult) {
	ctx := context.Background()
	r := &scaleResult{}
	h0 := heapInuse()
	drivers := make([]*scaleDriver, scaleDrivers)
	var err error
	drivers[0], err = startScaleDriver(ctx, driverRC, 0, slices)
	if err != nil {
		b.Fatal(err)
	}
	r.discovery = drivers[0].discovery
	r.discoveryCalls = drivers[0].api.snapshot().total()
	h1 := heapInuse()
	r.heap = mib(h1 - min(h0, h1))
	g, gctx := errgroup.WithContext(ctx)
	for i := 1; i < scaleDrivers; i++ {
		g.Go(func() (err error) {
			drivers[i], err = startScaleDriver(gctx, driverRC, i, slices)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		for _, d := range drivers {
			if d != nil {
				d.close()
			}
		}
		b.Fatal(err)
	}
	for _, d := range drivers[1:] {
		r.discovery8 = max(r.discovery8, d.discovery)
	}
	h8 := heapInuse()
	r.heap8 = mib(h8-min(h0, h8)) / scaleDrivers
	if path := os.Getenv("GORAY_E2E_SCALE_HEAP_PROFILE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, slices))
		if err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	return drivers, r
}

// watchNewSlice adds a one-host v6e 2x2 slice (a shape nobody claims)
// while the drivers run and returns how long it took until every driver's
// source had reported it.
func watchNewSlice(b *testing.B, cp *kubeharness.ControlPlane, drivers []*scaleDriver, pool string) time.Duration {
	t0 := time.Now()
	if _, err := cp.AddTPUNodePool(context.Background(), kubeharness.NodePool{Name: pool, Generation: "v6e", Topology: "2x2", Kwok: true}); err != nil {
		b.Fatal(err)
	}
	for _, d := range drivers {
		for !d.src.reported(pool) {
			if time.Since(t0) > time.Minute {
				b.Fatalf("%s has not reported slice %s after %v", d.id, pool, time.Since(t0))
			}
			time.Sleep(time.Millisecond)
		}
	}
	return time.Since(t0)
}

// runScaleClaims runs the claim loop: every driver claims and releases
// one slice of spec at a time, for as long as b.Loop hands out claims.
func runScaleClaims(b *testing.B, admin k8s.Interface, drivers []*scaleDriver, spec ray.SliceSpec, r *scaleResult) {
	ctx := context.Background()
	var (
		mu      sync.Mutex
		ledger  = map[string]string{} // slice → the driver holding it
		lat     []time.Duration
		claims  atomic.Int64
		work    = make(chan struct{})
		wg      sync.WaitGroup
		before  = make([]apiCounts, len(drivers))
		tries0  = make([]int64, len(drivers))
		held0   = make([]int64, len(drivers))
		waited0 = make([]time.Duration, len(drivers))
	)
	for i, d := range drivers {
		before[i], tries0[i], held0[i], waited0[i] = d.api.snapshot(), d.src.attempts.Load(), d.src.held.Load(), d.limiter.waited()
	}
	for _, d := range drivers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for range work {
				t0 := time.Now()
				spg, err := ray.NewSlicePlacementGroup(ctx, d.c, spec)
				if err != nil {
					b.Errorf("%s: reserve a %s %s: %v", d.id, spec.AcceleratorVersion, spec.Topology, err)
					continue
				}
				mine = append(mine, time.Since(t0))
				claims.Add(1)
				names := spg.SliceNames()
				mu.Lock()
				for _, s := range names {
					if other := ledger[s]; other != "" {
						b.Errorf("slice %s held by %s and %s at once", s, other, d.id)
					}
					ledger[s] = d.id
				}
				mu.Unlock()
				for _, s := range names {
					// While held, the API server agrees (the admin's
					// request, not counted).
					lease, err := admin.CoordinationV1().Leases("default").Get(ctx, LeaseName(s), metav1.GetOptions{})
					if err != nil || deref(lease.Spec.HolderIdentity) != d.id {
						b.Errorf("%s holds %s, but its Lease: %v, %v", d.id, s, lease, err)
					}
				}
				mu.Lock()
				for _, s := range names {
					delete(ledger, s)
				}
				mu.Unlock()
				if err := spg.Release(ctx); err != nil {
					b.Errorf("%s: release %v: %v", d.id, names, err)
				}
			}
		})
	}
	start, cpu0 := time.Now(), processCPU()
	for b.Loop() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0

	n := float64(claims.Load())
	r.claims = int(n)
	var calls apiCounts
	var tries, held int64
	var waited time.Duration
	for i, d := range drivers {
		calls.add(d.api.snapshot().minus(before[i]))
		tries += d.src.attempts.Load() - tries0[i]
		held += d.src.held.Load() - held0[i]
		waited += d.limiter.waited() - waited0[i]
	}
	slices.Sort(lat)
	r.byVerb = map[string]float64{}
	if n > 0 {
		r.claimsPerSec = n / elapsed.Seconds()
		r.p50, r.p99 = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
		r.maxLatency = ms(lat[len(lat)-1])
		r.calls = float64(calls.total()) / n
		r.attempts, r.heldRefusals = float64(tries)/n, float64(held)/n
		r.wait = ms(waited) / n
		r.cpu = ms(cpu) / n
		for v, c := range calls {
			r.byVerb[apiVerbs[v]] = float64(c) / n
		}
	}
	b.ReportMetric(r.claimsPerSec, "claims/s")
	b.ReportMetric(r.p50, "p50-ms")
	b.ReportMetric(r.p99, "p99-ms")
	b.ReportMetric(r.calls, "api-calls/claim")
	for _, v := range apiVerbs {
		b.ReportMetric(r.byVerb[v], v+"/claim")
	}
	b.ReportMetric(r.attempts, "attempts/claim")
	b.ReportMetric(r.wait, "throttled-ms/claim")
	b.ReportMetric(r.cpu, "cpu-ms/claim")
	b.ReportMetric(ms(r.discovery), "discovery-ms")
	b.ReportMetric(ms(r.discovery8), "discovery8-ms")
	b.ReportMetric(float64(r.discoveryCalls), "discovery-calls")
	b.ReportMetric(ms(r.newSlice), "newslice-ms")
	b.ReportMetric(r.heap, "heap-MiB/driver")
	b.ReportMetric(r.heap8, "heap8-MiB/driver")
	b.Logf("%d nodes, %d slices (the last %d nodes created in %v); %d claims of v6e %s by %d drivers in %v (max %.0f ms; %.2f refused as held per claim; %.1f ms CPU per claim); discovery %v alone, %v for 7 at once, a new slice seen by all 8 in %v; heap %.1f MiB for one driver, %.1f MiB each for 8",
		r.nodes, r.slices, r.added, r.create.Round(time.Millisecond), r.claims, spec.Topology, len(drivers), elapsed.Round(time.Millisecond),
		r.maxLatency, r.heldRefusals, r.cpu, r.discovery.Round(time.Millisecond), r.discovery8.Round(time.Millisecond), r.newSlice.Round(time.Millisecond), r.heap, r.heap8)
}

// scaleSummary is a table of each claim loop's figures by fleet size
// (the median of the runs -count made of it), with the largest size's
// over the smallest's.
func scaleSummary(rs []*scaleResult) string {
	var sb strings.Builder
	for _, c := range scaleClaims {
		var sizes []int
		bySize := map[int][]*scaleResult{}
		for _, r := range rs {
			if r.claim == c.spec.Topology && r.drivers == c.drivers {
				if bySize[r.nodes] == nil {
					sizes = append(sizes, r.nodes)
				}
				bySize[r.nodes] = append(bySize[r.nodes], r)
			}
		}
		if len(sizes) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\nscale summary: claims of v6e %s by %d drivers (median of %d runs)\n%-20s",
			c.spec.Topology, c.drivers, len(bySize[sizes[0]]), "nodes")
		for _, n := range sizes {
			fmt.Fprintf(&sb, " %10d", n)
		}
		fmt.Fprintf(&sb, " %10s", "last/first")
		row := func(name string, f func(r *scaleResult) float64) {
			fmt.Fprintf(&sb, "\n%-20s", name)
			var med []float64
			for _, n := range sizes {
				var vs []float64
				for _, r := range bySize[n] {
					vs = append(vs, f(r))
				}
				slices.Sort(vs)
				med = append(med, vs[len(vs)/2])
				fmt.Fprintf(&sb, " %10.2f", med[len(med)-1])
			}
			if first, last := med[0], med[len(med)-1]; len(med) > 1 && first != 0 {
				fmt.Fprintf(&sb, " %9.2fx", last/first)
			}
		}
		row("slices", func(r *scaleResult) float64 { return float64(r.slices) })
		row("create-s", func(r *scaleResult) float64 { return r.create.Seconds() })
		row("claims/s", func(r *scaleResult) float64 { return r.claimsPerSec })
		row("p50-ms", func(r *scaleResult) float64 { return r.p50 })
		row("p99-ms", func(r *scaleResult) float64 { return r.p99 })
		row("max-ms", func(r *scaleResult) float64 { return r.maxLatency })
		row("api-calls/claim", func(r *scaleResult) float64 { return r.calls })
		for _, v := range apiVerbs {
			row(v+"/claim", func(r *scaleResult) float64 { return r.byVerb[v] })
		}
		row("attempts/claim", func(r *scaleResult) float64 { return r.attempts })
		row("throttled-ms/claim", func(r *scaleResult) float64 { return r.wait })
		row("cpu-ms/claim", func(r *scaleResult) float64 { return r.cpu })
		row("discovery-ms", func(r *scaleResult) float64 { return ms(r.discovery) })
		row("discovery8-ms", func(r *scaleResult) float64 { return ms(r.discovery8) })
		row("discovery-calls", func(r *scaleResult) float64 { return float64(r.discoveryCalls) })
		row("newslice-ms", func(r *scaleResult) float64 { return ms(r.newSlice) })
		row("heap-MiB/driver", func(r *scaleResult) float64 { return r.heap })
		row("heap8-MiB/driver", func(r *scaleResult) float64 { return r.heap8 })
		sb.WriteString("\n")
	}
	return sb.String()
}

// scaleDriver is one driver of BenchmarkE2EScale.
type scaleDriver struct {
	id        string
	api       *apiCounter
	limiter   *timedLimiter
	src       *countingSource
	c         *ray.Cluster
	transport http.RoundTripper // its own, to close its idle connections
	discovery time.Duration
}

// startScaleDriver builds driver i on its own client and waits until its
// cluster lists all the fleet's slices.
func startScaleDriver(ctx context.Context, base *rest.Config, i, slices int) (*scaleDriver, error) {
	t0 := time.Now()
	d := &scaleDriver{id: fmt.Sprintf("scale-driver-%d", i), api: &apiCounter{}}
	rc := rest.CopyConfig(base)
	// A proxy function (none) keeps client-go from sharing one cached
	// transport between the drivers: each has its connection, as a
	// driver process has.
	rc.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	var once sync.Once
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		once.Do(func() { d.transport = rt })
		return d.api.wrap(rt)
	})
	// Client-side limits 20 times the backend's defaults, so that the API
	// server, not each driver's 50 requests/s, bounds the claims.
	d.limiter = &timedLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(20*DefaultAPIQPS, 20*DefaultAPIBurst)}
	rc.QPS, rc.Burst, rc.RateLimiter = 0, 0, d.limiter
	cfg := Config{REST: rc, Namespace: "default", Identity: d.id, Worker: WorkerConfig{Image: workerImage}}
	client, err := NewClientset(cfg)
	if err != nil {
		return nil, err
	}
	id := NewClusterID()
	leases, err := NewLeases(client, cfg)
	if err != nil {
		return nil, err
	}
	src, err := NewSource(client, cfg, id, leases)
	if err != nil {
		return nil, err
	}
	d.src = &countingSource{Source: src}
	rt, err := cluster.New(d.src, podlessRunner{}, cluster.Options{})
	if err != nil {
		return nil, err
	}
	if d.c, err = ray.NewCluster(ctx, rt, nil); err != nil {
		return nil, err
	}
	for {
		ss, err := rt.Slices(ctx)
		if err != nil {
			d.close()
			return nil, err
		}
		if len(ss) == slices {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			d.close()
			return nil, fmt.Errorf("%s lists %d slices after %v, want %d", d.id, len(ss), time.Since(t0), slices)
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.discovery = time.Since(t0)
	return d, nil
}

func (d *scaleDriver) close() {
	d.c.Close()
	if d.transport != nil {
		utilnet.CloseIdleConnectionsFor(d.transport)
	}
}

// podlessRunner is the runner of a driver on kwok nodes, where no pod
// runs: it starts nothing, so the runtime's claims end at the Leases.
type podlessRunner struct{}

func (podlessRunner) Start(_ context.Context, exec backend.Executor, _ cluster.LostFunc) (backend.Executor, error) {
	return exec, nil
}
func (podlessRunner) NodeUp(context.Context, cluster.Node) error { return nil }
func (podlessRunner) NodeDown(string)                            {}
func (podlessRunner) Close() error                               { return nil }

// countingSource is a Source that counts the runtime's claims and those
// refused because another driver holds a slice.
type countingSource struct {
	*Source
	attempts, held atomic.Int64
}

// reported says whether the source has reported every host of slice
// alive.
func (s *countingSource) reported(slice string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.slices[slice]
	return st != nil && st.hosts != nil && len(st.alive) == len(st.hosts)
}

func (s *countingSource) ClaimSlices(ctx context.Context, c cluster.Claim) error {
	s.attempts.Add(1)
	err := s.Source.ClaimSlices(ctx, c)
	if _, ok := errors.AsType[*cluster.HeldError](err); ok {
		s.held.Add(1)
	}
	return err
}

// timedLimiter sums the time its rate limiter made requests wait.
type timedLimiter struct {
	flowcontrol.RateLimiter
	ns atomic.Int64
}

func (l *timedLimiter) Wait(ctx context.Context) error {
	t0 := time.Now()
	err := l.RateLimiter.Wait(ctx)
	l.ns.Add(int64(time.Since(t0)))
	return err
}

func (l *timedLimiter) Accept() {
	t0 := time.Now()
	l.RateLimiter.Accept()
	l.ns.Add(int64(time.Since(t0)))
}

func (l *timedLimiter) waited() time.Duration { return time.Duration(l.ns.Load()) }

// apiVerbs are the kinds of request apiCounter tells apart.
var apiVerbs = [...]string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

type apiCounts [len(apiVerbs)]int64

func (c *apiCounts) add(o apiCounts) {
	for i := range c {
		c[i] += o[i]
	}
}

func (c apiCounts) minus(o apiCounts) apiCounts {
	for i := range c {
		c[i] -= o[i]
	}
	return c
}

func (c apiCounts) total() int64 {
	var t int64
	for _, n := range c {
		t += n
	}
	return t
}

// apiCounter counts a client's HTTP requests to the API server by verb.
type apiCounter struct{ n [len(apiVerbs)]atomic.Int64 }

func (a *apiCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		a.n[slices.Index(apiVerbs[:], apiVerb(r))].Add(1)
		return rt.RoundTrip(r)
	})
}

func (a *apiCounter) snapshot() apiCounts {
	var c apiCounts
	for i := range c {
		c[i] = a.n[i].Load()
	}
	return c
}

// apiVerb is the Kubernetes verb of a request to a resource path
// (/api/v1/..., /apis/<group>/<version>/...).
func apiVerb(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	named := len(parts) >= 2
	switch r.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
		return "watch"
	}
	if named {
		return "get"
	}
	return "list"
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapInuse is the heap in use after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the p-th of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
