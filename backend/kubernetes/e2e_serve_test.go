//go:build e2e

package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/ray"
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
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // a model step
		fmt.Fprint(w, os.Getenv("TPU_NAME"))
	})
	mux.HandleFunc("POST /sum", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"bytes": strconv.FormatInt(n, 10), "sha256": hex.EncodeToString(h.Sum(nil))})
	})
	mux.HandleFunc("POST /where", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{
			"listen": r.Context().Value(http.LocalAddrContextKey).(net.Addr).String(),
			"podIP":  os.Getenv("POD_IP"), "slice": os.Getenv("TPU_NAME"), "version": os.Getenv("VERSION"),
			"pid": strconv.Itoa(os.Getpid()),
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
	srv, base := serveProcess(t, c, func(d *serve.Deployment) {
		d.MinReplicas, d.Idempotent, d.MaxConcurrentRequests = 2, true, 32
	})

	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			resp, err := http.Post(base+"/proc/where", "application/json", strings.NewReader("{}"))
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

	// A 24 MiB chunked body streams through the router to the server in
	// the pod, every byte once and in order.
	const size = 24 << 20
	body := io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
	want := sha256.New()
	resp, err := http.Post(base+"/proc/sum", "application/octet-stream", io.TeeReader(body, want))
	is.NoErr(err)
	var sum map[string]string
	is.NoErr(json.NewDecoder(resp.Body).Decode(&sum))
	resp.Body.Close()
	is.Equal(resp.StatusCode, http.StatusOK)
	is.Equal(sum["bytes"], strconv.Itoa(size))
	is.Equal(sum["sha256"], hex.EncodeToString(want.Sum(nil)))
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// TestE2EServeFailoverAndScaleUp: a serve.Process deployment of two v6e
// 2x4 replicas (up to three, autoscaled) under 50 concurrent idempotent
// requests loses one replica's host-0 pod, deleted mid-flight: no request
// fails (each one in flight on it is retried on the other), the replica
// is replaced, and under sustained load the deployment scales up by a
// slice to three ready replicas.
func TestE2EServeFailoverAndScaleUp(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b", "slice-c"}, nil)
	srv, base := serveProcess(t, c, func(d *serve.Deployment) {
		d.Idempotent, d.MinReplicas, d.MaxReplicas, d.MaxConcurrentRequests, d.MaxQueuedRequests = true, 2, 3, 32, 1024
		d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 8, UpscaleDelay: 2 * time.Second, Interval: 200 * time.Millisecond}
		// A check's timeout is generous: at load 16+ with -race, a check's
		// round trip to the pod took over 200 ms twice in a row, which lost
		// healthy replicas; a lost pod is noticed as its host's loss anyway.
		d.Health = &serve.HealthCheck{Period: 200 * time.Millisecond, Timeout: 10 * time.Second, FailureThreshold: 2}
	})
	st, _ := srv.Status().Deployment("proc")
	is.Equal(st.Ready, 2)

	client := &http.Client{Timeout: time.Minute}
	load := func(n int) (failed []string) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := client.Post(base+"/proc/slow", "application/json", strings.NewReader("{}"))
				if err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b, _ := io.ReadAll(resp.Body)
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%d %s", resp.StatusCode, b))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return failed
	}

	// A replica's host-0 pod is deleted while 50 requests are in flight.
	victim := st.Replicas[0]
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
	is.NoErr(err)
	var pod string
	for _, p := range pods.Items {
		if p.Spec.NodeName == victim.Hosts[0] {
			pod = p.Name
		}
	}
	is.True(pod != "")
	done := make(chan []string, 1)
	go func() { done <- load(50) }()
	time.Sleep(150 * time.Millisecond) // requests are in flight on both replicas
	is.NoErr(cp.Client().CoreV1().Pods("default").Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	failed := <-done
	if len(failed) > 0 {
		t.Fatalf("%d of 50 requests failed while a replica's pod was deleted: %v", len(failed), failed)
	}
	is.NoErr(srv.WaitStatus(ctx, func(s serve.Status) bool {
		d, _ := s.Deployment("proc")
		return d.ReplicaFailures >= 1 && d.Ready >= 2
	})) // the lost replica was noticed and replaced

	// Sustained load: the autoscaler adds a replica on the third slice.
	stop := make(chan struct{})
	loadDone := make(chan []string, 1)
	go func() {
		var all []string
		for {
			select {
			case <-stop:
				loadDone <- all
				return
			default:
				all = append(all, load(64)...)
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = srv.WaitStatus(wctx, func(s serve.Status) bool {
		d, _ := s.Deployment("proc")
		return d.Ready == 3
	})
	close(stop)
	failed = <-loadDone
	if err != nil {
		states, _ := ray.TPUSlices(ctx, c)
		for _, st := range states {
			t.Logf("slice %s: intact %v, reserved by %q", st.Name, st.Intact, st.ReservedName)
		}
		d, _ := srv.Status().Deployment("proc")
		b, _ := json.MarshalIndent(d, "", "  ")
		t.Logf("deployment: %s", b)
	}
	is.NoErr(err) // scaled up by a slice
	is.Equal(len(failed), 0)
	st, _ = srv.Status().Deployment("proc")
	is.Equal(st.SlicesHeld, 3)
	t.Logf("scaled up to %d replicas; last scale-up took %v", st.Ready, st.LastScaleUp)
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// serveProcess serves a deployment "proc" of the test's external server
// (runHTTPServer, a serve.Process replica on v6e 2x4 slices) from c, with
// edit's changes, on a loopback listener; it returns the server and the
// router's base URL. The server shuts down at cleanup.
func serveProcess(t testing.TB, c *ray.Cluster, edit func(*serve.Deployment)) (*serve.Server, string) {
	t.Helper()
	srv := serve.New(c, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	d := procDeployment(t, "")
	edit(&d)
	if err := srv.Deploy(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	return srv, "http://" + l.Addr().String()
}

// procDeployment is the deployment "proc" of the test's external server
// (runHTTPServer) on v6e 2x4 slices; its /where says version.
func procDeployment(t testing.TB, version string) serve.Deployment {
	t.Helper()
	exe, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	return serve.Deployment{
		Name: "proc",
		Replica: serve.Process(serve.ProcessSpec{
			Command: []string{exe}, WorkerCommand: []string{exe},
			Env: map[string]string{"K8STEST_HTTP_SERVER": "1", "VERSION": version}, StopTimeout: 5 * time.Second,
		}),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
	}
}

// TestE2EServeRollingUpdate: a serve.Process deployment of two v6e 2x4
// replicas on a cluster of three slices (room for one replica more) is
// updated to a new version with RollingUpdate MaxSurge 1, MaxUnavailable 0
// while 50 concurrent idempotent clients send requests: none fails, every
// client reaches the new version (its server says so), the replicas are
// replaced one at a time (the whole new version beside the old would need
// four slices), the old version's pods are deleted, and once the server
// shuts down no pod is left.
func TestE2EServeRollingUpdate(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b", "slice-c"}, nil)
	version := func(v string) serve.Deployment {
		d := procDeployment(t, v)
		d.MinReplicas, d.Idempotent, d.MaxConcurrentRequests, d.MaxQueuedRequests = 2, true, 32, 1024
		d.RollingUpdate = &serve.RollingUpdate{MaxSurge: 1}
		return d
	}
	srv, base := serveProcess(t, c, func(d *serve.Deployment) { *d = version("v1") })
	oldPods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
	is.NoErr(err)
	is.Equal(len(oldPods.Items), 4) // two hosts for each of the two replicas

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	var stop atomic.Bool
	var requests, reachedV2 atomic.Int64
	var failed sync.Map
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			saw := false
			for !stop.Load() || !saw {
				requests.Add(1)
				resp, err := client.Post(base+"/proc/where", "application/json", strings.NewReader("{}"))
				if err != nil {
					failed.Store(i, err.Error())
					return
				}
				var got map[string]string
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					failed.Store(i, fmt.Sprintf("status %d, %v", resp.StatusCode, err))
					return
				}
				if got["version"] == "v2" && !saw {
					saw = true
					reachedV2.Add(1)
				}
			}
		})
	}
	start := time.Now()
	err = srv.Deploy(ctx, version("v2"))
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	is.NoErr(err)
	failed.Range(func(k, v any) bool {
		t.Errorf("client %v: a request failed during the update: %v", k, v)
		return true
	})
	t.Logf("update took %v; %d requests, none failed", took, requests.Load())
	is.Equal(reachedV2.Load(), int64(50)) // every client reached the new version

	st, _ := srv.Status().Deployment("proc")
	is.Equal(st.Ready, 2)
	for _, r := range st.Replicas {
		is.True(strings.HasPrefix(r.ID, "proc-v2-")) // the old version's replicas are gone
	}
	is.Equal(st.SlicesHeld, 2)
	for _, p := range oldPods.Items { // and so are their pods
		_, err := cp.WaitForPod(ctx, "default", p.Name, func(p *corev1.Pod) bool { return p == nil })
		is.NoErr(err)
	}
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
