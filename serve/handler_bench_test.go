package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/goray-dev/goray/serve"
)

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// SetReadDeadline lets http.ResponseController set deadlines, as on a
// connection.
func (w *discardWriter) SetReadDeadline(time.Time) error { return nil }

// BenchmarkHandlerEcho measures the handlers alone, without connections:
// the router's Handler against the bare echo handler, with one request
// object reused, so that what differs is the router's own work per
// request (routing, admission, body read, decode, the actor call and its
// bookkeeping). Its ns/op and allocs/op are steadier than the wall-clock
// ingress benchmarks on a loaded machine.
//
//	go test ./serve -run '^$' -bench HandlerEcho -benchmem
func BenchmarkHandlerEcho(b *testing.B) {
	body, _ := json.Marshal(EchoIn{Text: "hello"})
	run := func(b *testing.B, h http.Handler, path string) {
		w := &discardWriter{h: http.Header{}}
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			r, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, path, bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, r)
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
		if cpu := cpuTime() - cpu0; cpu > 0 {
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op") // the process's, GC included
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, bareEcho(nil), "/bench") })
	b.Run("router", func(b *testing.B) {
		c, _ := newCluster(b, 1)
		srv := serve.New(c, nil)
		d := deployment("bench")
		d.MinReplicas, d.MaxConcurrentRequests, d.MaxQueuedRequests = 1, 64, 4096
		d.Health = nil
		if err := srv.Deploy(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		run(b, srv.Handler(), "/bench")
	})
}
