package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/goray-dev/goray/serve"
)

// The ingress benchmarks compare the router with the same handler on a
// bare net/http server, in the same run (docs/serve.md has results):
//
//	go test ./serve -run '^$' -bench 'Ingress|ScaleUp' -benchtime 2s -count 3
//
// Echo is host-CPU bound (JSON in, JSON out): it measures the router's own
// cost. Model holds each request for 1ms of simulated accelerator time with
// 4 requests at a time per slice (bare: one slice's worth, behind a
// semaphore): throughput should grow with replicas.

// bareEcho is the echo model's handler without the router.
func bareEcho(sem *semaphore.Weighted) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in EchoIn
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if sem != nil {
			if err := sem.Acquire(r.Context(), 1); err != nil {
				return
			}
			defer sem.Release(1)
		}
		if in.Work > 0 {
			time.Sleep(in.Work)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(EchoOut{Text: "bench:" + in.Text, Host: "bare", WorkerID: "0"})
	})
}

// load sends requests from parallel clients for b.N requests and reports
// requests per second and the p99 latency.
func load(b *testing.B, url string, in EchoIn, clients int) {
	body, _ := json.Marshal(in)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(max(1, clients/max(1, testingProcs())))
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if !postOK(b, client, url, "application/json", body) {
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	el, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/el.Seconds(), "req/s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		if cpu > 0 {
			b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/req") // client and server
		}
	}
	b.ReportMetric(0, "ns/op")
}

func testingProcs() int { return max(1, runtimeProcs) }

func serveBare(b *testing.B, h http.Handler) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

func serveRouter(b *testing.B, replicas, limit int) string {
	c, _ := newCluster(b, replicas)
	srv := serve.New(c, nil)
	base, _ := startServer(b, srv)
	d := deployment("bench")
	d.MinReplicas, d.MaxConcurrentRequests, d.MaxQueuedRequests = replicas, limit, 4096
	d.Health = nil
	if err := srv.Deploy(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	return base + "/bench"
}

func BenchmarkIngressEcho(b *testing.B) {
	in := EchoIn{Text: "hello"}
	const clients = 16
	b.Run("bare", func(b *testing.B) { load(b, serveBare(b, bareEcho(nil)), in, clients) })
	b.Run("router-1", func(b *testing.B) { load(b, serveRouter(b, 1, 64), in, clients) })
}

// BenchmarkIngressEchoRatio measures Echo through the router against the
// bare net/http server in alternating rounds, with the same client, so
// that a machine whose load changes from second to second affects both
// alike: each iteration is one round of a fixed time on each, in turn
// (which goes first alternates). It reports the medians over the rounds
// of each one's requests per second, of the ratio router/bare within a
// round, and of the process's CPU time per request (client and server).
//
//	go test ./serve -run '^$' -bench IngressEchoRatio -benchtime 10x
func BenchmarkIngressEchoRatio(b *testing.B) {
	bare := serveBare(b, bareEcho(nil))
	router := serveRouter(b, 1, 64)
	body, _ := json.Marshal(EchoIn{Text: "hello"})
	const clients, round = 16, 500 * time.Millisecond
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	run := func(url string) (rps, cpuPerReq float64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		start, cpu0 := time.Now(), cpuTime()
		for range clients {
			wg.Go(func() {
				for time.Since(start) < round {
					if !postOK(b, client, url, "application/json", body) {
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		el, cpu := time.Since(start), cpuTime()-cpu0
		return float64(n.Load()) / el.Seconds(), float64(cpu.Microseconds()) / float64(max(1, n.Load()))
	}
	run(bare) // warm both up
	run(router)
	var bareRPS, routerRPS, ratios, bareCPU, routerCPU []float64
	b.ResetTimer()
	for i := range b.N {
		var br, bc, rr, rc float64
		if i%2 == 0 {
			br, bc = run(bare)
			rr, rc = run(router)
		} else {
			rr, rc = run(router)
			br, bc = run(bare)
		}
		bareRPS, routerRPS, ratios = append(bareRPS, br), append(routerRPS, rr), append(ratios, rr/br)
		bareCPU, routerCPU = append(bareCPU, bc), append(routerCPU, rc)
	}
	b.StopTimer()
	b.ReportMetric(median(bareRPS), "bare-req/s")
	b.ReportMetric(median(routerRPS), "router-req/s")
	b.ReportMetric(median(ratios), "ratio")
	if bareCPU[0] > 0 {
		b.ReportMetric(median(bareCPU), "bare-cpu-µs/req")
		b.ReportMetric(median(routerCPU), "router-cpu-µs/req")
	}
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func BenchmarkIngressModel(b *testing.B) {
	in := EchoIn{Text: "hello", Work: time.Millisecond}
	const clients, slots = 32, 4
	b.Run("bare-1slice", func(b *testing.B) { load(b, serveBare(b, bareEcho(semaphore.NewWeighted(slots))), in, clients) })
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("router-%d", n), func(b *testing.B) { load(b, serveRouter(b, n, slots), in, clients) })
	}
}

// BenchmarkScaleUp measures the time from the autoscaler's decision to add
// a replica to that replica's first request, on the simulator (a free
// slice waiting): reservation, actor start on both hosts, and routing.
func BenchmarkScaleUp(b *testing.B) {
	c, _ := newCluster(b, 2)
	srv := serve.New(c, nil)
	base, client := startServer(b, srv)
	d := deployment("scale")
	d.MinReplicas, d.MaxReplicas, d.MaxConcurrentRequests = 1, 2, 1
	d.Health = nil
	d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 1, Interval: time.Millisecond, DownscaleDelay: time.Millisecond}
	if err := srv.Deploy(context.Background(), d); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		g := newGate("scale")
		done := make(chan int, 2)
		for range 2 {
			go func() {
				c, _, _ := post(b, client, base+"/scale", EchoIn{Gate: g})
				done <- c
			}()
		}
		waitStatus(b, srv, "two replicas", func(st serve.Status) bool {
			d := dep(st, "scale")
			return d.Ready == 2 && d.Queued == 0 && d.Replicas[0].Ongoing+d.Replicas[1].Ongoing == 2
		})
		total += dep(srv.Status(), "scale").LastScaleUp
		gates.release(g)
		<-done
		<-done
		waitStatus(b, srv, "one replica", func(st serve.Status) bool { return len(dep(st, "scale").Replicas) == 1 })
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "scaleup-µs")
	b.ReportMetric(0, "ns/op")
}

var runtimeProcs = runtime.GOMAXPROCS(0)
