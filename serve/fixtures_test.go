package serve_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("SERVE_TEST_SERVER"); mode != "" {
		runTestServer(mode)
		return
	}
	ray.Main() // the worker processes of the handle tests run this binary
	goleak.VerifyTestMain(m)
}

// echo is the test model: it answers with its prefix, the input and where
// it runs.
type echo struct {
	prefix string
}

type EchoIn struct {
	Text string
	// Gate, if set, makes the call wait until the test opens that gate.
	Gate string
	// Fail makes the call return an error, FailWith one of that message.
	Fail     bool
	FailWith string `json:",omitempty"`
	// Status makes the call return serve.Error(Status, ...), Code an
	// error of that goray code.
	Status int           `json:",omitempty"`
	Code   ray.ErrorCode `json:",omitempty"`
	// Work is how long the call computes (on an accelerator, not the
	// host's CPU), for benchmarks.
	Work time.Duration `json:",omitempty"`
	// Step is how long one model step takes on the host's accelerator,
	// which runs one step at a time (see accelerator), for benchmarks.
	Step time.Duration `json:",omitempty"`
}

// accelerators holds a mutex per host: one model step at a time.
var accelerators sync.Map // host -> *sync.Mutex

// accelerator runs one model step of d on the host's accelerator.
func accelerator(ctx context.Context, d time.Duration) {
	rc, _ := ray.Runtime(ctx)
	mu, _ := accelerators.LoadOrStore(rc.NodeName(), new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	time.Sleep(d)
}

type EchoOut struct {
	Text, Host, WorkerID, Hostnames string
}

// constructed records the TPU_WORKER_ID of every echo actor built, by host.
var constructed sync.Map // host -> worker ID

// unhealthy makes the echo health check fail for actors on these hosts.
var unhealthy sync.Map // host -> true

// hung makes the echo health check of actors on these hosts wait until
// its context ends.
var hung sync.Map // host -> true

var (
	echoClass = ray.NewActorClass("servetest.echo", func(ctx context.Context, prefix string) (*echo, error) {
		if prefix == "broken" {
			return nil, errors.New("model weights not found")
		}
		rc, _ := ray.Runtime(ctx)
		constructed.Store(rc.NodeName(), rc.Env("TPU_WORKER_ID"))
		return &echo{prefix: prefix}, nil
	})
	echoCall = ray.NewMethod(echoClass, "call", func(ctx context.Context, e *echo, in EchoIn) (EchoOut, error) {
		if err := gates.wait(ctx, in.Gate); err != nil {
			gates.get(in.Gate).ended <- err // the call was cancelled at the gate
			return EchoOut{}, err
		}
		if in.Fail {
			return EchoOut{}, errors.New("the model refused")
		}
		if in.FailWith != "" {
			return EchoOut{}, errors.New(in.FailWith)
		}
		if in.Status != 0 {
			return EchoOut{}, fmt.Errorf("generate: %w", serve.Error(in.Status, "status "+strconv.Itoa(in.Status)+" asked for"))
		}
		if in.Code != ray.OK {
			return EchoOut{}, serve.CodeError(in.Code, in.Code.String()+" asked for")
		}
		if in.Work > 0 {
			time.Sleep(in.Work) // accelerator time: the host CPU is free
		}
		if in.Step > 0 {
			accelerator(ctx, in.Step)
		}
		rc, _ := ray.Runtime(ctx)
		return EchoOut{Text: e.prefix + in.Text, Host: rc.NodeName(), WorkerID: rc.Env("TPU_WORKER_ID"), Hostnames: rc.Env("TPU_WORKER_HOSTNAMES")}, nil
	})
	echoStream = serve.NewStream(echoClass, "words", func(ctx context.Context, e *echo, in EchoIn, send func(string) error) (err error) {
		if in.Gate != "" {
			defer func() { gates.get(in.Gate).ended <- err }()
		}
		for i, w := range strings.Fields(in.Text) {
			if i == 1 {
				if err := gates.wait(ctx, in.Gate); err != nil {
					return err
				}
			}
			if err := send(e.prefix + w); err != nil {
				return err
			}
		}
		if in.Fail {
			return errors.New("the model stopped")
		}
		return nil
	})
	// echoHTTP answers with what it saw of the request (201 for a POST);
	// /missing is serve.Error 404.
	echoHTTP = ray.NewMethod(echoClass, "http", func(ctx context.Context, e *echo, req serve.Request) (serve.Response, error) {
		if req.Path == "/missing" {
			return serve.Response{}, serve.Error(http.StatusNotFound, "no such item")
		}
		b, err := json.Marshal(map[string]any{"method": req.Method, "path": req.Path, "query": req.Query,
			"token": req.Header.Get("X-Token"), "hop": req.Header.Get("X-Hop"), "body": string(req.Body)})
		status := http.StatusOK
		if req.Method == http.MethodPost {
			status = http.StatusCreated
		}
		return serve.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}, "X-Served-By": {e.prefix}}, Body: b}, err
	})
	echoCheck = ray.NewMethod(echoClass, "check", func(ctx context.Context, e *echo, _ struct{}) (struct{}, error) {
		rc, _ := ray.Runtime(ctx)
		if _, bad := unhealthy.Load(rc.NodeName()); bad {
			return struct{}{}, errors.New("accelerator wedged")
		}
		if _, stuck := hung.Load(rc.NodeName()); stuck {
			<-ctx.Done()
			return struct{}{}, ctx.Err()
		}
		return struct{}{}, nil
	})
)

func echoReplica(prefix string) serve.Replica {
	return serve.Actor(echoClass, prefix, serve.Unary(echoCall), serve.Streaming(echoStream), serve.Check(echoCheck))
}

// gateSet holds calls until a test opens their gate, and counts arrivals.
type gateSet struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	open    chan struct{}
	arrived atomic.Int32
	arrival chan struct{} // one send per arrival
	ended   chan error    // a gated stream's function returned this
}

var gates = &gateSet{m: map[string]*gate{}}

var gateSeq atomic.Int64

// newGate returns a fresh gate name, so that tests run with -count > 1
// never see a gate an earlier run opened.
func newGate(name string) string {
	return fmt.Sprintf("%s#%d", name, gateSeq.Add(1))
}

func (g *gateSet) get(name string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	x := g.m[name]
	if x == nil {
		x = &gate{open: make(chan struct{}), arrival: make(chan struct{}, 1024), ended: make(chan error, 1024)}
		g.m[name] = x
	}
	return x
}

func (g *gateSet) wait(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	x := g.get(name)
	x.arrived.Add(1)
	x.arrival <- struct{}{}
	select {
	case <-x.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// arrivals waits until n calls reached gate name.
func (g *gateSet) arrivals(t *testing.T, name string, n int) {
	t.Helper()
	x := g.get(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range n {
		select {
		case <-x.arrival:
		case <-ctx.Done():
			t.Fatalf("gate %s: %d arrivals, want %d", name, x.arrived.Load(), n)
		}
	}
}

func (g *gateSet) release(name string) { close(g.get(name).open) }

// newCluster simulates n v6e 2x4 slices of two 4-chip hosts each.
func newCluster(t testing.TB, n int) (*ray.Cluster, *local.Backend) {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 1, Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", Count: n, ChipsPerHost: 4}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, b
}

// deployment is an echo deployment on v6e 2x4 replicas, with fast health
// checks.
func deployment(name string) serve.Deployment {
	return serve.Deployment{
		Name: name, Replica: echoReplica(name + ":"),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MaxConcurrentRequests: 4,
		Health:                &serve.HealthCheck{Period: 20 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2},
	}
}

// startServer serves srv on a loopback port and shuts it down at cleanup.
func startServer(t testing.TB, srv *serve.Server) (base string, client *http.Client) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		client.CloseIdleConnections()
	})
	return "http://" + l.Addr().String(), client
}

// post sends a JSON body and returns the status code, the Retry-After
// header and the body.
func post(t testing.TB, client *http.Client, url string, in any) (int, string, []byte) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return 0, "", nil
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("POST %s: read body: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), out
}

// postOK posts body to url as contentType, reads the answer to its end
// and reports whether it was 200; otherwise it has reported the error on
// tb (without stopping: benchmarks call it from several goroutines).
func postOK(tb testing.TB, client *http.Client, url, contentType string, body []byte) bool {
	resp, err := client.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		tb.Error(err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Errorf("status %d", resp.StatusCode)
		return false
	}
	return true
}

// sseEvent is one server-sent event.
type sseEvent struct{ Event, Data string }

// readSSE parses a server-sent event stream.
func readSSE(r io.Reader) ([]sseEvent, error) {
	var evs []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			evs = append(evs, cur)
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		default:
			return evs, fmt.Errorf("unexpected SSE line %q", line)
		}
	}
	return evs, sc.Err()
}

// waitStatus waits for cond, failing the test after 30s.
func waitStatus(t testing.TB, srv *serve.Server, what string, cond func(serve.Status) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitStatus(ctx, cond); err != nil {
		st, _ := json.MarshalIndent(srv.Status(), "", "  ")
		t.Fatalf("waiting for %s: %v; status:\n%s", what, err, st)
	}
}

// dep returns the status of deployment name.
func dep(st serve.Status, name string) serve.DeploymentStatus {
	d, _ := st.Deployment(name)
	return d
}

// reservedSlices counts the cluster's reserved slices.
func reservedSlices(t testing.TB, c *ray.Cluster) int {
	t.Helper()
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range states {
		if s.ReservedBy != 0 {
			n++
		}
	}
	return n
}

// runTestServer is the external HTTP server of the Process tests: this
// test binary, started by a replica with SERVE_TEST_SERVER set.
func runTestServer(mode string) {
	if id := os.Getenv("TPU_WORKER_ID"); id != "" && id != "0" {
		// A worker host's process: it runs until the replica stops it.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		<-ctx.Done()
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"body": string(b), "worker": os.Getenv("TPU_WORKER_ID"), "hostnames": os.Getenv("TPU_WORKER_HOSTNAMES"),
			"query": r.URL.RawQuery, "listen": r.Context().Value(http.LocalAddrContextKey).(net.Addr).String(),
			"model": r.Header.Get(serve.ModelIDHeader),
		})
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
	// /flaky closes its first connection (in any replica: a marker file
	// in SERVE_TEST_STATE says it happened) before answering; /eof
	// always does; /cut sends one event of a stream, then breaks the
	// connection.
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		marker := filepath.Join(os.Getenv("SERVE_TEST_STATE"), "flaky")
		if f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			closeConn(w)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	})
	// /v1/chat/completions is an OpenAI server's: it answers a stream of
	// one chunk, or one object, naming the model the body and the
	// multiplexing header gave it.
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		content := fmt.Sprintf("process %s (header %s)", req.Model, r.Header.Get(serve.ModelIDHeader))
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", req.Model, content)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"id\":\"p\",\"object\":\"chat.completion\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":\"stop\"}]}\n", req.Model, content)
	})
	mux.HandleFunc("POST /eof", func(w http.ResponseWriter, r *http.Request) { closeConn(w) })
	// Redirects: to a path of this server, absolute (built from the Host
	// header, as Starlette does) or not, and to another site.
	mux.HandleFunc("GET /moved-abs", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+r.Host+"/events%2Fx?a=1", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("GET /moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/events", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/computeMetadata/v1/", http.StatusFound)
	})
	mux.HandleFunc("POST /sink", sink)
	// /early answers without reading the request body.
	mux.HandleFunc("POST /early", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"early":true}`) })
	mux.HandleFunc("GET /cut", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	// /raw... answers with the request URI exactly as it arrived and the
	// X-Secret header, before any path cleaning.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.RequestURI, "/raw") {
			json.NewEncoder(w).Encode(map[string]string{"uri": r.RequestURI, "secret": r.Header.Get("X-Secret")})
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: net.JoinHostPort(os.Getenv("HOST"), os.Getenv("PORT")), Handler: handler}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// SinkOut is what /sink saw of a request body.
type SinkOut struct {
	Bytes         int64
	SHA256        string
	Chunked       bool
	ContentLength int64
	Expect        string
}

// sink reads the request body, slowly with ?delay (a sleep after every
// read of ?chunk bytes, 64 KiB by default), and answers with SinkOut
// (without its SHA256 with ?nohash).
// With ?log=name it appends "arrival" to SERVE_TEST_STATE/name when the
// request arrives and "complete" when its body was read whole. With
// ?die=n, the first request of that log in any replica (a marker file
// says which) reads n bytes and then ends its server's process, as a
// replica dying mid-request would.
func sink(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	delay, _ := time.ParseDuration(q.Get("delay"))
	chunk, _ := strconv.Atoi(q.Get("chunk"))
	state, name := os.Getenv("SERVE_TEST_STATE"), q.Get("log")
	note := func(line string) {
		if name == "" {
			return
		}
		f, err := os.OpenFile(filepath.Join(state, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			f.WriteString(line + "\n")
			f.Close()
		}
	}
	note("arrival")
	if die, err := strconv.ParseInt(q.Get("die"), 10, 64); err == nil {
		if f, err := os.OpenFile(filepath.Join(state, name+".died"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			io.CopyN(io.Discard, r.Body, die)
			os.Exit(3)
		}
	}
	h := sha256.New()
	if q.Has("nohash") {
		h = nil
	}
	buf := make([]byte, cmp.Or(chunk, 64<<10))
	var n int64
	for {
		k, err := r.Body.Read(buf)
		if h != nil {
			h.Write(buf[:k])
		}
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(delay)
	}
	note("complete")
	out := SinkOut{Bytes: n, Chunked: slices.Contains(r.TransferEncoding, "chunked"), ContentLength: r.ContentLength, Expect: r.Header.Get("Expect")}
	if h != nil {
		out.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// closeConn closes the request's connection without a response.
func closeConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}
