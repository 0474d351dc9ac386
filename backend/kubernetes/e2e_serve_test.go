//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/serve"
)

// runHTTPServer is the external server of TestE2EServeProcess: it answers
// with where it listens and its pod's IP, on HOST:PORT.
func runHTTPServer() {
	if os.Getenv("TPU_WORKER_ID") != "0" {
		select {} // a worker host's process runs until stopped
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("POST /where", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{
			"listen": r.Context().Value(http.LocalAddrContextKey).(net.Addr).String(),
			"podIP":  os.Getenv("POD_IP"), "slice": os.Getenv("TPU_NAME"),
		})
	})
	srv := &http.Server{Addr: net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")), Handler: mux}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// TestE2EServeProcess: a serve.Process deployment of two v6e 2x4 slice
// replicas on a real control plane runs its external server in host 0's
// pod, listening on that pod's IP (not on loopback), and the router in the
// driver reaches it over the pod network; 50 concurrent requests from a
// client outside the pods all succeed and reach both replicas.
func TestE2EServeProcess(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, nil)
	exe, err := osExecutable()
	is.NoErr(err)

	srv := serve.New(c, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	go srv.Serve(l)
	defer srv.Shutdown(context.WithoutCancel(ctx))
	is.NoErr(srv.Deploy(ctx, serve.Deployment{
		Name: "proc",
		Replica: serve.Process(serve.ProcessSpec{
			Command: []string{exe}, WorkerCommand: []string{exe},
			Env: map[string]string{"K8STEST_HTTP_SERVER": "1"}, StopTimeout: 5 * time.Second,
		}),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4, MinReplicas: 2, Idempotent: true, MaxConcurrentRequests: 32,
	}))

	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			resp, err := http.Post("http://"+l.Addr().String()+"/proc/where", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var got map[string]string
			if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&got) != nil {
				t.Errorf("status %d", resp.StatusCode)
				return
			}
			host, _, _ := net.SplitHostPort(got["listen"])
			if host != got["podIP"] || host == "127.0.0.1" {
				t.Errorf("the server listens on %s, its pod's IP is %s", got["listen"], got["podIP"])
			}
			mu.Lock()
			seen[got["slice"]] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("requests reached the replicas on %v", seen)
	is.Equal(len(seen), 2) // both replicas served
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
