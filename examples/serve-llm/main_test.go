package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

func TestMain(m *testing.M) {
	ray.Main() // the worker processes of TestWorkerProcesses run this binary
	goleak.VerifyTestMain(m)
}

// fixture is the LLM deployment on a simulated cluster, served on loopback.
type fixture struct {
	b      *local.Backend
	c      *ray.Cluster
	srv    *serve.Server
	base   string
	client *http.Client
}

func newFixture(t *testing.T, slices, replicas int, cfg Config, opts ...*local.Options) *fixture {
	t.Helper()
	b, err := local.New(ClusterSpec(slices), append(opts, nil)[0])
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	srv := serve.New(c, nil)
	d := Deployment(cfg, replicas, replicas)
	d.Health = &serve.HealthCheck{Period: 20 * time.Millisecond}
	if err := srv.Deploy(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	f := &fixture{b: b, c: c, srv: srv, base: "http://" + l.Addr().String(), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		f.client.CloseIdleConnections()
	})
	return f
}

// complete sends a unary request and checks the completion.
func (f *fixture) complete(req Request) error {
	body, _ := json.Marshal(req)
	resp, err := f.client.Post(f.base+"/llm", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /llm: %d %s", resp.StatusCode, b)
	}
	var c Completion
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	if want := strings.Join(Tokens(req), " "); c.Text != want {
		return fmt.Errorf("POST /llm: got %q, want %q", c.Text, want)
	}
	return nil
}

// stream sends a streaming request and checks every token arrived once,
// in order, then the done event.
func (f *fixture) stream(req Request) error {
	body, _ := json.Marshal(req)
	resp, err := f.client.Post(f.base+"/llm/stream", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST /llm/stream: %d %s", resp.StatusCode, b)
	}
	var got []string
	event := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "":
			var tok Token
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &tok); err != nil {
				return err
			}
			if tok.Index != len(got) {
				return fmt.Errorf("token %d arrived as number %d", tok.Index, len(got))
			}
			got = append(got, tok.Text)
		case strings.HasPrefix(line, "data: ") && event != "done":
			return fmt.Errorf("stream failed: %s %s", event, line)
		}
	}
	if event != "done" {
		return fmt.Errorf("stream ended without done (last event %q, %d tokens)", event, len(got))
	}
	if want := Tokens(req); !slices.Equal(got, want) {
		return fmt.Errorf("stream: got %q, want %q", got, want)
	}
	return sc.Err()
}

func TestServeLLM(t *testing.T) {
	f := newFixture(t, 2, 1, Config{})
	if err := f.complete(Request{Prompt: "hello", MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	if err := f.stream(Request{Prompt: "hello", MaxTokens: 50}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.client.Post(f.base+"/llm", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":0}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(b), "max_tokens 0: want 1 to 4096") {
		t.Errorf("bad request: %d %s", resp.StatusCode, b)
	}
}

// TestKillHostUnderLoad sends concurrent unary and streaming requests,
// kills a host of a replica that is serving some of them, and checks that
// no request failed and that the replica was replaced on a fresh slice.
func TestKillHostUnderLoad(t *testing.T) {
	for _, host := range []int{0, 1} {
		t.Run(fmt.Sprintf("host %d", host), func(t *testing.T) {
			f := newFixture(t, 3, 2, Config{TokenTime: 2 * time.Millisecond})
			const clients, perClient = 8, 6
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				failures []error
				done     = make(chan struct{}, clients*perClient)
			)
			for i := range clients {
				wg.Go(func() {
					for j := range perClient {
						req := Request{Prompt: fmt.Sprintf("client %d request %d", i, j), MaxTokens: 20 + i}
						var err error
						if (i+j)%2 == 0 {
							err = f.stream(req)
						} else {
							err = f.complete(req)
						}
						if err != nil {
							mu.Lock()
							failures = append(failures, err)
							mu.Unlock()
						}
						done <- struct{}{}
					}
				})
			}
			// Once traffic flows, kill a host of a replica with requests
			// in flight.
			<-done
			var victim serve.ReplicaStatus
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := f.srv.WaitStatus(ctx, func(st serve.Status) bool {
				d, _ := st.Deployment("llm")
				for _, r := range d.Replicas {
					if r.State == "READY" && r.Ongoing > 0 {
						victim = r
						return true
					}
				}
				return false
			})
			if err != nil {
				t.Fatal(err)
			}
			dead := victim.Hosts[host]
			if err := f.b.KillNode(context.Background(), dead); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for _, err := range failures {
				t.Errorf("request failed: %v", err)
			}
			err = f.srv.WaitStatus(ctx, func(st serve.Status) bool {
				d, _ := st.Deployment("llm")
				if d.Ready != 2 || d.ReplicaFailures < 1 {
					return false
				}
				for _, r := range d.Replicas {
					if slices.Contains(r.Hosts, dead) {
						return false
					}
				}
				return true
			})
			if err != nil {
				t.Fatalf("replica on %s not replaced: %v; status %+v", dead, err, f.srv.Status())
			}
			// The kill hit requests in flight: they were replayed.
			if n := counter(t, f.srv, "goray_serve_retries_total"); n < 1 {
				t.Errorf("retries: %v, want at least 1", n)
			}
			// The replacement serves.
			if err := f.complete(Request{Prompt: "after", MaxTokens: 4}); err != nil {
				t.Error(err)
			}
		})
	}
}

// counter sums the Prometheus counter name over its labels, from the
// server's text exposition.
func counter(t *testing.T, srv *serve.Server, name string) float64 {
	t.Helper()
	var buf bytes.Buffer
	srv.WriteMetrics(&buf)
	total := 0.0
	for line := range strings.Lines(buf.String()) {
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// TestWorkerProcesses runs the model's actors in worker processes, so
// that requests, stream chunks and the slice env cross a real process
// boundary, then kills the process of a serving host with SIGKILL.
func TestWorkerProcesses(t *testing.T) {
	f := newFixture(t, 2, 1, Config{}, &local.Options{Processes: &local.ProcessOptions{}})
	if err := f.complete(Request{Prompt: "hello", MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	if err := f.stream(Request{Prompt: "hello", MaxTokens: 300}); err != nil {
		t.Fatal(err)
	}
	st, _ := f.srv.Status().Deployment("llm")
	host := st.Replicas[0].Hosts[0]
	pid, ok := f.b.WorkerPIDs()[host]
	if !ok {
		t.Fatalf("no worker process for %s: %v", host, f.b.WorkerPIDs())
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = f.srv.WaitStatus(ctx, func(st serve.Status) bool {
		d, _ := st.Deployment("llm")
		return d.Ready == 1 && d.ReplicaFailures >= 1 && !slices.Contains(d.Replicas[0].Hosts, host)
	})
	if err != nil {
		t.Fatalf("replica on %s not replaced: %v; status %+v", host, err, f.srv.Status())
	}
	if err := f.stream(Request{Prompt: "after", MaxTokens: 5}); err != nil {
		t.Error(err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCtrlCSaysItDrains: once it listens the program prints how to call
// it (curl lines that work); on Ctrl-C (its context ending) it says
// it is draining, how many requests are in flight, and when it is done,
// instead of going quiet while it drains.
func TestCtrlCSaysItDrains(t *testing.T) {
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, &out, "127.0.0.1:0", 2, false) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "serving llm on") {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 30s: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The curl lines it prints work: each is sent as curl would send it.
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var tried int
	for line := range strings.Lines(out.String()) {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "curl" {
			continue
		}
		tried++
		url := fields[2]
		var resp *http.Response
		var err error
		if _, data, ok := strings.Cut(line, " -d '"); ok {
			data, _, _ = strings.Cut(data, "'")
			resp, err = client.Post(url, "application/x-www-form-urlencoded", strings.NewReader(data)) // curl -d's type
		} else {
			resp, err = client.Get(url)
		}
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || (strings.Contains(line, "grep goray_serve") && !strings.Contains(string(b), "goray_serve")) {
			t.Errorf("%s: %s %.200s", strings.TrimSpace(line), resp.Status, b)
		}
	}
	if tried != 7 {
		t.Errorf("printed %d curl lines, want 7:\n%s", tried, out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log(got)
	for _, want := range []string{"shutting down: draining 0 in-flight requests", "press Ctrl-C again to stop at once", "replicas stopped, slices released"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestOpenAIFront: the two models are served through the OpenAI front,
// one per replica (each keeps one loaded), deterministic per model; an
// unknown model is a 404 naming it.
func TestOpenAIFront(t *testing.T) {
	f := newFixture(t, 2, 2, Config{})
	chat := func(model string) (string, string) {
		t.Helper()
		resp, err := f.client.Post(f.base+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}`, model)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.Status, string(b)
		}
		var out struct {
			Object  string
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal(b, &out); err != nil || out.Object != "chat.completion" || len(out.Choices) != 1 || out.Choices[0].FinishReason != "length" {
			t.Fatalf("%s: %v %s", model, err, b)
		}
		return resp.Status, out.Choices[0].Message.Content
	}
	_, tiny := chat("tiny")
	_, tinyChat := chat("tiny-chat")
	if len(strings.Fields(tiny)) != 5 || tiny == tinyChat {
		t.Errorf("tiny %q, tiny-chat %q: want 5 tokens each, different", tiny, tinyChat)
	}
	if _, again := chat("tiny"); again != tiny {
		t.Errorf("tiny again: %q, want %q", again, tiny)
	}
	loaded := map[string]bool{}
	for _, r := range f.srv.Status().Deployments[0].Replicas {
		if len(r.Models) != 1 {
			t.Errorf("replica %s has models %v, want one", r.ID, r.Models)
		}
		for _, m := range r.Models {
			loaded[m] = true
		}
	}
	if !loaded["tiny"] || !loaded["tiny-chat"] {
		t.Errorf("models loaded: %v", loaded)
	}
	if status, body := chat("gpt-nope"); status != "404 Not Found" || !strings.Contains(body, `\"gpt-nope\"`) {
		t.Errorf("unknown model: %s %s", status, body)
	}
}
