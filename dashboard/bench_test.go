package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

var benchNoop = ray.NewTask("dashboard_test.noop", func(ctx context.Context, _ struct{}) (string, error) { return "ok", nil })

// BenchmarkTasksWithStatusEndpoint is ray's SingleClientTasksAsync (1000
// no-op tasks submitted, then all their results read) on one 64-CPU node,
// with the status endpoint off, serving on loopback but unread, and read
// (the view and the metrics fetched every 100ms, as a busy dashboard and a
// scraper would). Run each mode in its own process, interleaved, and
// compare with `benchstat -col /endpoint` (docs/benchmarks.md): within one
// process the first sub-benchmark of a round runs slower whatever it is.
func BenchmarkTasksWithStatusEndpoint(b *testing.B) {
	for _, mode := range []string{"off", "idle", "read"} {
		b.Run("endpoint="+mode, func(b *testing.B) {
			be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "head", Resources: backend.Resources{backend.CPU: 64}}}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, err := ray.NewCluster(ctx, be, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			done := make(chan struct{})
			if mode == "off" {
				close(done)
			} else {
				d, err := dashboard.New(c, &dashboard.Options{Token: "t"})
				if err != nil {
					b.Fatal(err)
				}
				ln, err := dashboard.Listen("127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go func() { d.Serve(ctx, ln); close(done) }()
				if mode == "read" {
					go readEvery(ctx, "http://"+ln.Addr().String(), 100*time.Millisecond)
				}
			}
			refs := make([]ray.ObjectRef[string], 1000)
			b.ReportAllocs()
			for b.Loop() {
				for i := range refs {
					refs[i] = benchNoop.Remote(ctx, c, struct{}{})
				}
				if _, err := ray.GetAll(ctx, refs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(refs))/b.Elapsed().Seconds(), "tasks/s")
			cancel()
			<-done
		})
	}
}

// readEvery fetches the view and the metrics every period until ctx ends.
func readEvery(ctx context.Context, base string, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		for _, path := range []string{"/api/view", "/metrics"} {
			req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
			req.Header.Set("Authorization", "Bearer t")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
