package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

func TestHandler(t *testing.T) {
	c := cluster(t)
	d, err := dashboard.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path string
		code         int
		contentType  string
		body         string
	}{
		{"GET", "/", 200, "text/html", `<section id="slices">`},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/static/app.js", 200, "text/javascript", "EventSource"},
		{"GET", "/static/app.css", 200, "text/css", ".chip.dead"},
		{"GET", "/api/view", 200, "application/json", `"shapes"`},
		{"GET", "/nope", 404, "text/plain", ""},
		{"POST", "/api/view", 405, "text/plain", "read-only"},
		{"DELETE", "/", 405, "text/plain", "read-only"},
		{"PUT", "/static/app.js", 405, "text/plain", "read-only"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			is := is.New(t)
			rec := httptest.NewRecorder()
			d.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			is.Equal(rec.Code, tt.code)
			is.True(strings.HasPrefix(rec.Header().Get("Content-Type"), tt.contentType))
			is.True(strings.Contains(rec.Body.String(), tt.body))
			if tt.code == 405 {
				is.Equal(rec.Header().Get("Allow"), "GET, HEAD")
			}
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/dash/", http.StripPrefix("/dash", d))
	for _, path := range []string{"/dash/", "/dash/static/app.js", "/dash/api/view"} {
		t.Run("mounted under a prefix: "+path, func(t *testing.T) {
			is := is.New(t)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			is.Equal(rec.Code, 200)
		})
	}
	t.Run("the view decodes", func(t *testing.T) {
		is := is.New(t)
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, httptest.NewRequest("GET", "/api/view", nil))
		var v dashboard.View
		is.NoErr(json.Unmarshal(rec.Body.Bytes(), &v))
		is.Equal(len(v.Shapes), 3)
		is.Equal(len(v.Shapes[0].Slices[0].Chips), 16)
	})
}

func TestNewRejects(t *testing.T) {
	c := cluster(t)
	tests := []struct {
		name string
		c    *ray.Cluster
		opts *dashboard.Options
		want string
	}{
		{"nil cluster", nil, nil, "nil cluster"},
		{"negative interval", c, &dashboard.Options{Interval: -time.Second}, "negative Interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := dashboard.New(tt.c, tt.opts)
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), tt.want))
		})
	}
}

// readEvent reads one server-sent event's data.
func readEvent(t *testing.T, r *bufio.Reader) dashboard.View {
	t.Helper()
	var ev, data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			ev = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	if ev != "view" {
		t.Fatalf("event %q, want view", ev)
	}
	var v dashboard.View
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEventsFollowTheCluster(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, &dashboard.Options{Interval: time.Millisecond})
	is.NoErr(err)
	srv := httptest.NewServer(d)
	defer srv.Close()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	is.NoErr(err)
	resp, err := http.DefaultClient.Do(req)
	is.NoErr(err)
	defer resp.Body.Close()
	is.Equal(resp.Header.Get("Content-Type"), "text/event-stream")
	r := bufio.NewReader(resp.Body)
	first := readEvent(t, r)
	is.Equal(len(first.Reservations), 0)

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2", Name: "later"})
	is.NoErr(err)
	defer spg.Release(ctx)
	for {
		v := readEvent(t, r) // the test's deadline fails it if the stream never shows the reservation
		if len(v.Reservations) == 1 {
			is.Equal(v.Reservations[0].Name, "later")
			break
		}
	}
}

func TestServeStopsWithContext(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, &dashboard.Options{Interval: time.Hour})
	is.NoErr(err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln) }()

	base := "http://" + ln.Addr().String()
	stream, err := http.Get(base + "/api/events") // an open stream must not hold up shutdown
	is.NoErr(err)
	defer stream.Body.Close()
	readEvent(t, bufio.NewReader(stream.Body))

	tests := []struct {
		host string
		code int
	}{
		{ln.Addr().String(), 200},
		{"localhost:8265", 200},
		{"[::1]:8265", 200},
		{"evil.example:8265", http.StatusMisdirectedRequest},
		{"10.0.0.1", http.StatusMisdirectedRequest},
	}
	for _, tt := range tests {
		t.Run("Host "+tt.host, func(t *testing.T) {
			is := is.New(t)
			req, err := http.NewRequest("GET", base+"/api/view", nil)
			is.NoErr(err)
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			is.NoErr(err)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			is.Equal(resp.StatusCode, tt.code)
		})
	}
	cancel()
	is.NoErr(<-done)
	_, err = net.Dial("tcp", ln.Addr().String())
	is.True(err != nil) // the listener is closed
	http.DefaultClient.CloseIdleConnections()
}

func TestListenDefaultsToLoopback(t *testing.T) {
	is := is.New(t)
	is.True(strings.HasPrefix(dashboard.DefaultAddr, "127.0.0.1:"))
	ln, err := dashboard.Listen("")
	if err != nil {
		t.Skipf("the default port is taken: %v", err)
	}
	defer ln.Close()
	is.True(ln.Addr().(*net.TCPAddr).IP.IsLoopback())
}

type fakeServe struct{ st serve.Status }

func (f fakeServe) Status() serve.Status { return f.st }

func TestTrackServe(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	d.TrackServe(fakeServe{serve.Status{Deployments: []serve.DeploymentStatus{{Name: "llm", Ready: 2, P99: time.Millisecond}}}})
	d.TrackServe(fakeServe{serve.Status{Deployments: []serve.DeploymentStatus{{Name: "embed"}}}})
	v := d.View(t.Context())
	is.Equal(len(v.Serve), 2)
	is.Equal(v.Serve[0].Name, "llm")
	is.Equal(v.Serve[0].P99, time.Millisecond)
	is.Equal(v.Serve[1].Name, "embed")
}

var failing = ray.NewTask("dashboard_test.failing", func(ctx context.Context, msg string) (int, error) {
	return 0, errors.New(msg)
})

// TestAPIWork: /api/view reports the tasks queued and running per name and
// the recent failures, newest first, with their code, message and node.
func TestAPIWork(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "solo", Resources: backend.Resources{backend.CPU: 1}}}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), b, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)

	for _, msg := range []string{"shard 6 missing", "shard 7 missing"} {
		_, err = failing.Remote(ctx, c, msg, ray.Name("loader")).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
	}
	started, release := make(chan struct{}, 3), make(chan struct{})
	blockStarted, blockRelease = started, release
	var refs []ray.ObjectRef[int]
	for i := range 3 {
		refs = append(refs, block.Remote(ctx, c, i, ray.Name("step"), ray.Resources{ray.CPU: 1}))
	}
	<-started // one runs, two wait for the node's one CPU

	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "/api/view", nil))
	close(release)
	is.Equal(rec.Code, 200)
	var raw struct {
		Work struct {
			Tasks    []map[string]any `json:"tasks"`
			Failures []map[string]any `json:"failures"`
		} `json:"work"`
	}
	is.NoErr(json.Unmarshal(rec.Body.Bytes(), &raw))
	is.Equal(raw.Work.Tasks, []map[string]any{{"name": "step", "queued": 2.0, "running": 1.0}})
	is.Equal(len(raw.Work.Failures), 2)
	f := raw.Work.Failures[0] // the newest first
	is.Equal(f["task"], "loader")
	is.Equal(f["attempt"], 0.0)
	is.Equal(f["code"], "TaskFailed")
	is.True(strings.Contains(f["message"].(string), "shard 7 missing"))
	is.Equal(f["node"], "solo")
	at, err := time.Parse(time.RFC3339Nano, f["time"].(string))
	is.NoErr(err)
	is.True(!at.IsZero())
	is.True(strings.Contains(raw.Work.Failures[1]["message"].(string), "shard 6 missing"))
	for _, r := range refs {
		_, err := r.Get(ctx)
		is.NoErr(err)
	}
}

// TestPagePlaceholders: until the first view arrives, every section of the
// page says it is waiting instead of showing nothing.
func TestPagePlaceholders(t *testing.T) {
	is := is.New(t)
	d, err := dashboard.New(cluster(t), nil)
	is.NoErr(err)
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	is.Equal(rec.Code, 200)
	page := rec.Body.String()
	for _, id := range []string{"reservations", "shapes", "nodes", "work-summary", "failures", "runs", "deployments"} {
		i := strings.Index(page, `id="`+id+`"`)
		is.True(i >= 0)
		end := min(i+200, len(page))
		is.True(strings.Contains(page[i:end], "Waiting for the cluster…")) // a placeholder in each section
	}
}

// TestNodesSortNaturally: the view lists nodes as people read them, w2
// before w10.
func TestNodesSortNaturally(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{
		{Name: "w10", Resources: backend.Resources{backend.CPU: 1}},
		{Name: "w2", Resources: backend.Resources{backend.CPU: 1}},
		{Name: "w1", Resources: backend.Resources{backend.CPU: 1}},
	}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), b, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	var names []string
	for _, n := range d.View(t.Context()).Nodes {
		names = append(names, n.Name)
	}
	is.Equal(names, []string{"w1", "w2", "w10"})
}

// withOutput is a backend whose workers wrote a line on node w1.
type withOutput struct{ *local.Backend }

func (withOutput) RecentOutput(node string) []string {
	if node == "w1" {
		return []string{"(task t, node=w1, pid=7) hello"}
	}
	return nil
}

// A backend that keeps its workers' output (backend.OutputReader) has each
// node's last lines in the view.
func TestNodeOutput(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{
		{Name: "w1", Resources: backend.Resources{backend.CPU: 1}},
		{Name: "w2", Resources: backend.Resources{backend.CPU: 1}},
	}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), withOutput{b}, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	nodes := d.View(t.Context()).Nodes
	is.Equal(nodes[0].Output, []string{"(task t, node=w1, pid=7) hello"})
	is.Equal(len(nodes[1].Output), 0)
}
