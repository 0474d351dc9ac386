package serve_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/serve"
)

// BenchmarkHandle compares a call through a handle, in the server's
// process and from another process (over the network to the router, as
// from a worker process or a pod), with POST /<name>, on the host-CPU
// bound echo endpoint (docs/serve.md has results):
//
//	go test ./serve -run '^$' -bench Handle -benchtime 2s -count 3
func BenchmarkHandle(b *testing.B) {
	in := EchoIn{Text: "hello"}
	const clients = 16
	b.Run("http", func(b *testing.B) { load(b, serveRouter(b, 1, 64), in, clients) })
	handle := func(b *testing.B) (serve.DeploymentHandle[EchoIn, EchoOut], func(*testing.B) serve.DeploymentHandle[EchoIn, EchoOut]) {
		c, _ := newCluster(b, 1)
		srv := serve.New(c, nil)
		_, _ = startServer(b, srv)
		d := deployment("bench")
		d.MaxConcurrentRequests, d.MaxQueuedRequests, d.Health = 64, 4096, nil
		if err := srv.Deploy(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		h, err := serve.Handle[EchoIn, EchoOut](srv, "bench")
		if err != nil {
			b.Fatal(err)
		}
		return h, func(b *testing.B) serve.DeploymentHandle[EchoIn, EchoOut] { return elsewhere(b, h, "") }
	}
	b.Run("handle", func(b *testing.B) {
		h, _ := handle(b)
		loadCalls(b, h, in, clients)
	})
	b.Run("handle-remote", func(b *testing.B) {
		_, remote := handle(b)
		loadCalls(b, remote(b), in, clients)
	})
}

// loadCalls is load for handle calls.
func loadCalls(b *testing.B, h serve.DeploymentHandle[EchoIn, EchoOut], in EchoIn, clients int) {
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(max(1, clients/max(1, testingProcs())))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if _, err := h.Call(context.Background(), in); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	el := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/el.Seconds(), "req/s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(0, "ns/op")
}
