package serve_test

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/goray-dev/goray/serve"
)

// BenchmarkProxyBody sends 32 MiB request bodies, one at a time, through
// a Process replica whose server reads and discards them, with the
// default retry buffer (the body streams; the ingress keeps its first
// MiB) and with a retry buffer as large as MaxBodyBytes (the ingress
// keeps every body whole, as it did before bodies streamed). B/op is the
// memory the ingress allocates per request (docs/serve.md has results):
//
//	go test ./serve -run '^$' -bench ProxyBody -benchtime 20x -count 3
func BenchmarkProxyBody(b *testing.B) {
	const size = 32 << 20
	body := make([]byte, size)
	rand.Read(body)
	for _, bc := range []struct {
		name  string
		retry int64
	}{
		{"stream", 0},
		{"keep-whole", 64 << 20},
	} {
		srv := serve.New(newSingleHostCluster(b, 1), &serve.Options{MaxBodyBytes: 64 << 20, RetryBufferBytes: bc.retry})
		base, client := startServer(b, srv)
		if err := srv.Deploy(context.Background(), sinkDeployment(b, "bench", b.TempDir(), 1, true)); err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if !postOK(b, client, base+"/bench/sink?nohash", "application/octet-stream", body) {
					b.FailNow()
				}
			}
		})
	}
}

// BenchmarkProxySmall sends small JSON requests ("{}") from 16 clients
// through a Process replica whose server reads and discards them: the
// path of most model requests, whose body is read whole and sent with the
// request's head. allocs/op, B/op and cpu-µs/op are this process's, the
// client's included (the replica's server is another process), so that
// two binaries compare by the router's own work on a loaded machine.
//
//	go test ./serve -run '^$' -bench ProxySmall -benchmem -benchtime 3s
func BenchmarkProxySmall(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts *serve.Options
	}{{"server=fast", nil}, {"server=nethttp", &serve.Options{NetHTTPOnly: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			srv := serve.New(newSingleHostCluster(b, 1), mode.opts)
			base, client := startServer(b, srv)
			d := sinkDeployment(b, "bench", b.TempDir(), 1, true)
			d.MaxConcurrentRequests = 64
			if err := srv.Deploy(context.Background(), d); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(8) // 16 clients on 2 cores
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !postOK(b, client, base+"/bench/sink?nohash", "application/json", []byte("{}")) {
						return
					}
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
