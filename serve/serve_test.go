package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

func TestDeployRejectsBadDeployments(t *testing.T) {
	c, _ := newCluster(t, 1)
	ok := deployment("ok")
	tests := []struct {
		name string
		edit func(*serve.Deployment)
		want string
	}{
		{"empty name", func(d *serve.Deployment) { d.Name = "" }, "Deployment.Name: \"\" is not a valid name"},
		{"slash in name", func(d *serve.Deployment) { d.Name = "a/b" }, "is not a valid name"},
		{"no replica", func(d *serve.Deployment) { d.Replica = nil }, "Deployment.Replica: nil; use serve.Actor or serve.Process"},
		{"no topology", func(d *serve.Deployment) { d.Topology = "" }, "Deployment.Topology: empty"},
		{"max below min", func(d *serve.Deployment) { d.MinReplicas, d.MaxReplicas = 2, 1 }, "Deployment.MaxReplicas: 1 is below MinReplicas 2"},
		{"negative", func(d *serve.Deployment) { d.MaxConcurrentRequests = -1 }, "negative"},
		{"no endpoint", func(d *serve.Deployment) { d.Replica = serve.Actor(echoClass, "x") }, "no endpoint"},
		{"empty command", func(d *serve.Deployment) { d.Replica = serve.Process(serve.ProcessSpec{}) }, "empty Command"},
		{"bad topology", func(d *serve.Deployment) { d.Topology = "4x5" }, "2x4"},
		{"shape the cluster lacks", func(d *serve.Deployment) { d.Topology, d.ChipsPerVM = "4x4", 0 }, "the cluster has no slice of that shape"},
		{"constructor fails", func(d *serve.Deployment) { d.Replica = echoReplica("broken") }, "model weights not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			srv := serve.New(c, nil)
			defer srv.Shutdown(context.Background())
			d := ok
			tt.edit(&d)
			err := srv.Deploy(context.Background(), d)
			is.True(err != nil)
			t.Log(err)
			is.True(strings.Contains(err.Error(), tt.want)) // the error says what is wrong
			_, found := srv.Status().Deployment(d.Name)
			is.True(!found) // a failed deployment is removed
			is.Equal(reservedSlices(t, c), 0)
		})
	}
}

func TestUnaryAndStream(t *testing.T) {
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is0 := is.New(t)
	is0.NoErr(srv.Deploy(context.Background(), deployment("echo")))

	t.Run("unary call on host 0 with the slice env", func(t *testing.T) {
		is := is.New(t)
		code, _, body := post(t, client, base+"/echo", EchoIn{Text: "hi"})
		is.Equal(code, http.StatusOK)
		var out EchoOut
		is.NoErr(json.Unmarshal(body, &out))
		is.Equal(out.Text, "echo:hi")
		is.Equal(out.WorkerID, "0")
		is.Equal(len(strings.Split(out.Hostnames, ",")), 2) // a 2-host slice
		st := dep(srv.Status(), "echo")
		is.Equal(len(st.Replicas), 1)
		is.Equal(st.Replicas[0].Hosts[0], out.Host)
		// Every host of the slice runs an actor with its own worker ID.
		for i, h := range st.Replicas[0].Hosts {
			id, ok := constructed.Load(h)
			is.True(ok)
			is.Equal(id, []string{"0", "1"}[i])
		}
	})
	t.Run("stream", func(t *testing.T) {
		is := is.New(t)
		words := make([]string, 600) // more than the stream buffer holds
		for i := range words {
			words[i] = "w" + string(rune('a'+i%26))
		}
		resp, err := client.Post(base+"/echo/stream", "application/json", strings.NewReader(`{"Text":"`+strings.Join(words, " ")+`"}`))
		is.NoErr(err)
		defer resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(resp.Header.Get("Content-Type"), "text/event-stream")
		evs, err := readSSE(resp.Body)
		is.NoErr(err)
		is.Equal(len(evs), len(words)+1)
		for i, w := range words {
			is.Equal(evs[i].Data, `"echo:`+w+`"`)
		}
		is.Equal(evs[len(words)].Event, "done")
	})
	t.Run("stream error after chunks", func(t *testing.T) {
		is := is.New(t)
		resp, err := client.Post(base+"/echo/stream", "application/json", strings.NewReader(`{"Text":"a b","Fail":true}`))
		is.NoErr(err)
		defer resp.Body.Close()
		evs, err := readSSE(resp.Body)
		is.NoErr(err)
		is.Equal(len(evs), 3)
		is.Equal(evs[2].Event, "error")
		is.True(strings.Contains(evs[2].Data, "the model stopped"))
	})
	errs := []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"bad JSON", "POST", "/echo", `{"Text":`, 400, "not a JSON serve_test.EchoIn"},
		{"user error", "POST", "/echo", `{"Fail":true}`, 500, "the model refused"},
		{"unknown deployment", "POST", "/nope", `{}`, 404, `no deployment \"nope\"`},
		{"wrong method", "GET", "/echo", ``, 405, "use POST"},
		{"unknown path", "POST", "/echo/x", `{}`, 404, "serves POST /echo and POST /echo/stream"},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			resp, err := client.Do(req)
			is.NoErr(err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			is.Equal(resp.StatusCode, tt.code)
			is.True(strings.Contains(string(b), tt.want)) // the error says what was wrong
		})
	}
	t.Run("status and metrics", func(t *testing.T) {
		is := is.New(t)
		resp, err := client.Get(base + "/-/status")
		is.NoErr(err)
		var st serve.Status
		is.NoErr(json.NewDecoder(resp.Body).Decode(&st))
		resp.Body.Close()
		d := dep(st, "echo")
		is.Equal(d.Ready, 1)
		is.Equal(d.SlicesHeld, 1)
		is.Equal(d.Accelerator, "v6e")
		is.True(d.RequestsPerSecond > 0)
		is.True(d.P50 > 0 && d.P99 >= d.P50)
		is.True(d.Replicas[0].Served >= 3)

		resp, err = client.Get(base + "/-/metrics")
		is.NoErr(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`goray_serve_requests_total{code="200",deployment="echo"}`,
			`goray_serve_requests_total{code="400",deployment="echo"}`,
			`goray_serve_replicas{deployment="echo",state="READY"} 1`,
			`goray_serve_slices_held{deployment="echo"} 1`,
			`goray_serve_request_duration_seconds_bucket{deployment="echo"`,
			`goray_serve_queued_requests{deployment="echo"} 0`,
			"\ngo_goroutines ", // the Go runtime's metrics
		} {
			is.True(strings.Contains(string(b), want)) // metric present
		}
	})
}

func TestOverloadAnswers503WithRetryAfter(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	g := newGate("busy")
	d := deployment("busy")
	d.MaxConcurrentRequests, d.MaxQueuedRequests = 1, 1
	is.NoErr(srv.Deploy(context.Background(), d))

	codes := make(chan int, 2)
	for range 2 {
		go func() {
			code, _, _ := post(t, client, base+"/busy", EchoIn{Text: "x", Gate: g})
			codes <- code
		}()
	}
	gates.arrivals(t, g, 1)
	waitStatus(t, srv, "one request queued", func(st serve.Status) bool { return dep(st, "busy").Queued == 1 })
	code, retry, body := post(t, client, base+"/busy", EchoIn{Text: "y"})
	is.Equal(code, http.StatusServiceUnavailable)
	is.Equal(retry, "1")
	is.True(strings.Contains(string(body), "every replica is at its limit and the queue is full"))
	gates.release(g)
	is.Equal(<-codes, 200)
	is.Equal(<-codes, 200) // the queued request ran once the slot freed
}

func TestRequestTimeout(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	g := newGate("slow")
	d := deployment("slow")
	d.RequestTimeout = 50 * time.Millisecond
	is.NoErr(srv.Deploy(context.Background(), d))
	code, _, body := post(t, client, base+"/slow", EchoIn{Gate: g})
	is.Equal(code, http.StatusGatewayTimeout)
	is.True(strings.Contains(string(body), "deadline exceeded"))
	gates.release(g)
}

func TestShutdownDrainsRequestsInFlight(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	g := newGate("drain")
	d := deployment("drain")
	d.MinReplicas = 2
	is.NoErr(srv.Deploy(context.Background(), d))
	is.Equal(reservedSlices(t, c), 2)

	const n = 6
	type result struct {
		code int
		body string
	}
	results := make(chan result, n+1)
	for range n {
		go func() {
			code, _, body := post(t, client, base+"/drain", EchoIn{Text: "x", Gate: g})
			results <- result{code, string(body)}
		}()
	}
	go func() {
		resp, err := client.Post(base+"/drain/stream", "application/json", strings.NewReader(`{"Text":"a b c","Gate":"`+g+`"}`))
		if err != nil {
			results <- result{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		evs, err := readSSE(resp.Body)
		if err != nil || len(evs) != 4 || evs[3].Event != "done" {
			results <- result{0, "stream cut short"}
			return
		}
		results <- result{resp.StatusCode, ""}
	}()
	gates.arrivals(t, g, n+1)

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	waitStatus(t, srv, "shutdown begun", func(st serve.Status) bool { return st.ShuttingDown })
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with requests in flight: %v", err)
	default:
	}
	gates.release(g)
	for range n + 1 {
		r := <-results
		is.Equal(r.code, http.StatusOK) // every request in flight finished
	}
	is.NoErr(<-shut)
	is.Equal(reservedSlices(t, c), 0)            // every slice released
	is.NoErr(srv.Shutdown(context.Background())) // a second Shutdown is a no-op
	is.Equal(len(dep(srv.Status(), "drain").Replicas), 0)
}

func TestExclusiveSlicesPerReplica(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 3)
	srv := serve.New(c, nil)
	startServer(t, srv)
	d := deployment("three")
	d.MinReplicas = 3
	is.NoErr(srv.Deploy(context.Background(), d))
	st := dep(srv.Status(), "three")
	seen := map[string]bool{}
	for _, r := range st.Replicas {
		is.Equal(len(r.Slices), 1)
		is.Equal(len(r.Hosts), 2)
		is.True(!seen[r.Slices[0]]) // each replica owns its own slice
		seen[r.Slices[0]] = true
	}
	is.Equal(st.SlicesHeld, 3)
	is.Equal(reservedSlices(t, c), 3)
}

func TestHealthCheckReplacesReplica(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is.NoErr(srv.Deploy(context.Background(), deployment("sick")))
	st := dep(srv.Status(), "sick")
	old := st.Replicas[0]
	unhealthy.Store(old.Hosts[0], true)
	defer unhealthy.Delete(old.Hosts[0])

	waitStatus(t, srv, "replacement", func(st serve.Status) bool {
		d := dep(st, "sick")
		return d.ReplicaFailures == 1 && d.Ready == 1 && len(d.Replicas) == 1 && d.Replicas[0].ID != old.ID
	})
	now := dep(srv.Status(), "sick").Replicas[0]
	is.True(now.Slices[0] != old.Slices[0]) // a fresh slice: the old one was still being released
	code, _, _ := post(t, client, base+"/sick", EchoIn{Text: "x"})
	is.Equal(code, 200)
	_ = ray.ErrClosed
}

// A replica whose health check hangs until its Timeout holds up no other
// replica's checks: a failing replica beside it is replaced after its
// FailureThreshold checks, a few Periods, not after the hung check's
// Timeout.
func TestHungHealthCheckHoldsUpNoOther(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 3)
	srv := serve.New(c, nil)
	startServer(t, srv)
	d := deployment("pair")
	d.MinReplicas = 2
	d.Health = &serve.HealthCheck{Period: 20 * time.Millisecond, Timeout: time.Hour, FailureThreshold: 2}
	is.NoErr(srv.Deploy(context.Background(), d))
	st := dep(srv.Status(), "pair")
	is.Equal(len(st.Replicas), 2)
	stuck, sick := st.Replicas[0], st.Replicas[1]
	hung.Store(stuck.Hosts[0], true)
	defer hung.Delete(stuck.Hosts[0])
	unhealthy.Store(sick.Hosts[0], true)
	defer unhealthy.Delete(sick.Hosts[0])

	waitStatus(t, srv, "the failing replica replaced", func(st serve.Status) bool {
		d := dep(st, "pair")
		if d.ReplicaFailures != 1 || d.Ready != 2 {
			return false
		}
		ids := map[string]bool{}
		for _, r := range d.Replicas {
			ids[r.ID] = true
		}
		return ids[stuck.ID] && !ids[sick.ID] // the hung one stays: its check has not failed yet
	})
}

func TestClientGoneCancelsStream(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is.NoErr(srv.Deploy(context.Background(), deployment("gone")))
	g := newGate("gone")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/gone/stream", strings.NewReader(`{"Text":"a b c","Gate":"`+g+`"}`))
	resp, err := client.Do(req)
	is.NoErr(err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	is.NoErr(err)
	is.Equal(line, "data: \"gone:a\"\n") // the first chunk arrived
	gates.arrivals(t, g, 1)              // the function waits before the second
	cancel()                             // the client goes away
	resp.Body.Close()
	select {
	case err := <-gates.get(g).ended:
		is.True(errors.Is(err, context.Canceled)) // the stream's function was cancelled on the replica
	case <-time.After(30 * time.Second):
		t.Fatal("the stream's function still runs after its client left")
	}
	waitStatus(t, srv, "the slot freed", func(st serve.Status) bool { return dep(st, "gone").Replicas[0].Ongoing == 0 })
}
