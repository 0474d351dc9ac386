package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// bodyGen is a request body of n pseudo-random bytes, made as it is read
// (the test holds none of it) and hashed as it goes.
type bodyGen struct {
	n, off int64
	x      uint64
	h      hash.Hash
}

func newBodyGen(n int64) *bodyGen { return &bodyGen{n: n, x: 0x9e3779b97f4a7c15, h: sha256.New()} }

func (g *bodyGen) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.n-g.off)]
	var word [8]byte
	for i := 0; i < len(p); i += 8 {
		g.x ^= g.x << 13
		g.x ^= g.x >> 7
		g.x ^= g.x << 17
		binary.LittleEndian.PutUint64(word[:], g.x)
		copy(p[i:], word[:])
	}
	g.h.Write(p)
	g.off += int64(len(p))
	return len(p), nil
}

func (g *bodyGen) sum() string { return hex.EncodeToString(g.h.Sum(nil)) }

// newSingleHostCluster simulates n v6e 2x2 slices of one host each.
func newSingleHostCluster(t testing.TB, n int) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: n}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sinkDeployment runs the test server (its /sink endpoint) on n
// single-host replicas sharing the state directory.
func sinkDeployment(t testing.TB, name, state string, n int, idempotent bool) serve.Deployment {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return serve.Deployment{
		Name: name,
		Replica: serve.Process(serve.ProcessSpec{
			Command:     []string{exe, "-test.run=^$"},
			Env:         map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": state},
			StopTimeout: 5 * time.Second,
		}),
		Accelerator: "v6e", Topology: "2x2",
		MinReplicas: n, Idempotent: idempotent,
		// Checks often, so a dead replica is found at once; a slow answer
		// (a starved replica under -race) is not taken for a dead one.
		Health: &serve.HealthCheck{Period: 20 * time.Millisecond, Timeout: 2 * time.Second},
	}
}

// upload POSTs body to url with the Content-Length n (-1: chunked) and
// returns the status and the answer.
func upload(t *testing.T, client *http.Client, url string, body io.Reader, n int64, header http.Header) (int, []byte) {
	t.Helper()
	code, out, _ := uploadConn(t, client, url, body, n, header)
	return code, out
}

// uploadConn is upload, and reports whether the answer said the server
// closes the connection (Connection: close).
func uploadConn(t *testing.T, client *http.Client, url string, body io.Reader, n int64, header http.Header) (int, []byte, bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read the answer: %v", url, err)
	}
	if resp.StatusCode >= 500 {
		t.Logf("POST %s: %s %s", url, resp.Status, out) // says why, when the test did not expect it
	}
	return resp.StatusCode, out, resp.Close
}

// heldBody is a request body that returns r, then waits for release
// before it fails with io.ErrUnexpectedEOF: a client that stops sending
// until it has the answer.
type heldBody struct {
	r       io.Reader
	release chan struct{}
}

func (h *heldBody) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if err == io.EOF {
		<-h.release
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// sinkOut decodes a /sink answer.
func sinkOut(t *testing.T, b []byte) SinkOut {
	t.Helper()
	var out SinkOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return out
}

// logLines counts the lines of a /sink log that are line.
func logLines(t *testing.T, state, name, line string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(state, name))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if sc.Text() == line {
			n++
		}
	}
	return n
}

// retriesOf reads goray_serve_retries_total of a deployment.
func retriesOf(srv *serve.Server, name string) int {
	prefix := `goray_serve_retries_total{deployment="` + name + `"} `
	for line := range strings.Lines(metricsText(srv)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return 0
}

// heapSampler samples the bytes of live and not yet collected heap
// objects every few milliseconds until stopped, and returns the peak.
func heapSampler() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	done, peakc := make(chan struct{}), make(chan uint64, 1)
	go func() {
		var peak uint64
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-tick.C:
			case <-done:
				peakc <- peak
				return
			}
		}
	}()
	return func() uint64 { close(done); return <-peakc }
}

// Requests to Process replicas stream their bodies: the ingress holds at
// most the retry buffer of a body (Options.RetryBufferBytes) whatever its
// size, a request whose replica fails before responding is retried with
// the kept prefix replayed when no more than that was sent, and answers
// 502 saying the body was too large to retry when more was; a
// non-idempotent deployment is never retried; chunked bodies and Expect:
// 100-continue work.
func TestProcessBodyStreaming(t *testing.T) {
	const retryBuf = 64 << 10
	c := newSingleHostCluster(t, 6) // two deployments of 2 replicas, and room for replacements
	srv := serve.New(c, &serve.Options{MaxBodyBytes: 128 << 20, RetryBufferBytes: retryBuf})
	base, client := startServer(t, srv)
	state := t.TempDir()
	if err := srv.Deploy(context.Background(), sinkDeployment(t, "up", state, 2, true)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Deploy(context.Background(), sinkDeployment(t, "once", state, 2, false)); err != nil {
		t.Fatal(err)
	}
	ready := func(name string) {
		waitStatus(t, srv, name+" with 2 ready replicas", func(st serve.Status) bool { return dep(st, name).Ready == 2 })
	}

	t.Run("64 MiB through a slow upstream in bounded memory", func(t *testing.T) {
		is := is.New(t)
		const size = 64 << 20
		serve.BodyMemory(srv) // new high-water marks from here
		runtime.GC()
		stop := heapSampler()
		before := stop()
		stop = heapSampler()
		gen := newBodyGen(size)
		t0 := time.Now()
		code, b := upload(t, client, base+"/up/sink?delay=1ms", gen, size, nil)
		peak := stop()
		is.Equal(code, http.StatusOK)
		out := sinkOut(t, b)
		is.Equal(out.Bytes, int64(size)) // every byte arrived, once, in order
		is.Equal(out.SHA256, gen.sum())
		is.Equal(out.ContentLength, int64(size))
		budget, buffers := serve.BodyMemory(srv)
		growth := int64(peak) - int64(before)
		t.Logf("%d MiB in %v; budget high-water %d B, retry buffers high-water %d B, heap objects %d KiB before, peak +%d KiB",
			size>>20, time.Since(t0).Round(time.Millisecond), budget, buffers, before>>10, growth>>10)
		is.True(budget <= retryBuf)  // the budget counted the retry buffer only
		is.True(buffers <= retryBuf) // and the ingress held no more of the body
		// The heap, garbage included, grew by far less than the body (a
		// whole-body ingress holds all 64 MiB).
		is.True(growth < 32<<20)
	})
	t.Run("chunked body", func(t *testing.T) {
		is := is.New(t)
		gen := newBodyGen(8 << 20)
		code, b, closed := uploadConn(t, client, base+"/up/sink", gen, -1, nil)
		is.Equal(code, http.StatusOK)
		is.True(!closed) // read to its end: the connection is kept for the next request
		out := sinkOut(t, b)
		is.True(out.Chunked) // streamed on as chunks: the length is not known
		is.Equal(out.Bytes, int64(8<<20))
		is.Equal(out.SHA256, gen.sum())
	})
	t.Run("Expect: 100-continue", func(t *testing.T) {
		is := is.New(t)
		// This client waits up to 30s for 100 Continue before it sends the
		// body: the ingress sends it once it reads the body.
		tr := &http.Transport{ExpectContinueTimeout: 30 * time.Second}
		defer tr.CloseIdleConnections()
		gen := newBodyGen(1 << 20)
		t0 := time.Now()
		code, b := upload(t, &http.Client{Transport: tr}, base+"/up/sink", gen, 1<<20, http.Header{"Expect": {"100-continue"}})
		is.Equal(code, http.StatusOK)
		is.True(time.Since(t0) < 10*time.Second)
		out := sinkOut(t, b)
		is.Equal(out.SHA256, gen.sum())
		is.Equal(out.Expect, "") // answered by the ingress, not forwarded
	})
	t.Run("answered before the body was read", func(t *testing.T) {
		is := is.New(t)
		// The client sends part of its body, then waits for the answer
		// before it sends the rest (or not): the replica's answer reaches
		// it at once, and the handler does not wait for the body's end.
		pr, pw := io.Pipe()
		answered := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
				return
			}
			<-answered
			pw.CloseWithError(io.ErrUnexpectedEOF)
		})
		defer wg.Wait()
		t0 := time.Now()
		req, err := http.NewRequest(http.MethodPost, base+"/up/early", pr)
		is.NoErr(err)
		req.ContentLength = 4 << 20
		resp, err := client.Do(req)
		is.NoErr(err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		close(answered)
		is.NoErr(err)
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(string(b), `{"early":true}`)
		is.True(resp.Close)                      // the body was not all read: the connection closes, as the answer says
		is.True(time.Since(t0) < 10*time.Second) // not BodyTimeout's 60 s
	})
	t.Run("lost before responding, body within the retry buffer: retried", func(t *testing.T) {
		is := is.New(t)
		ready("up")
		retries := retriesOf(srv, "up")
		gen := newBodyGen(16 << 10)
		code, b := upload(t, client, base+"/up/sink?die=4096&log=small", gen, 16<<10, nil)
		is.Equal(code, http.StatusOK)
		out := sinkOut(t, b)
		is.Equal(out.Bytes, int64(16<<10)) // the kept prefix replayed: the whole body, once
		is.Equal(out.SHA256, gen.sum())
		is.Equal(logLines(t, state, "small", "arrival"), 2)  // the replica that died, then another
		is.Equal(logLines(t, state, "small", "complete"), 1) // which read the whole body
		is.Equal(retriesOf(srv, "up"), retries+1)
	})
	t.Run("lost after more than the retry buffer was sent: 502, not retried", func(t *testing.T) {
		is := is.New(t)
		ready("up")
		retries := retriesOf(srv, "up")
		// The client sends 2 of the 4 MiB it declares, then holds the rest
		// until it has the answer: the ingress cannot have read the whole
		// body when it answers. (Sending all 4 MiB at once made the test
		// depend on timing: a replica slow to exit after its 1 MiB let the
		// kernel's socket buffers take the rest, the ingress read the body
		// to its end, and then rightly kept the connection.)
		body := &heldBody{r: io.LimitReader(newBodyGen(4<<20), 2<<20), release: make(chan struct{})}
		defer close(body.release)
		code, b, closed := uploadConn(t, client, base+"/up/sink?die=1048576&log=large", body, 4<<20, nil)
		t.Logf("%d %s", code, b)
		is.Equal(code, http.StatusBadGateway)
		// The rest of the body was not read: the server closes the
		// connection and says so, or the next request on it would fail.
		is.True(closed)
		var e map[string]string
		is.NoErr(json.Unmarshal(b, &e))
		is.True(strings.Contains(e["error"], "too large to retry"))
		is.True(strings.Contains(e["error"], "Options.RetryBufferBytes"))
		is.True(strings.Contains(e["error"], strconv.Itoa(retryBuf)))
		is.True(!strings.Contains(e["error"], "127.0.0.1"))
		is.True(!strings.Contains(e["error"], "http://"))
		is.Equal(logLines(t, state, "large", "arrival"), 1)
		is.Equal(logLines(t, state, "large", "complete"), 0)
		is.Equal(retriesOf(srv, "up"), retries)
	})
	t.Run("not idempotent: never retried", func(t *testing.T) {
		is := is.New(t)
		ready("once")
		code, b := upload(t, client, base+"/once/sink?die=4096&log=once", newBodyGen(16<<10), 16<<10, nil)
		t.Logf("%d %s", code, b)
		is.Equal(code, http.StatusBadGateway)
		is.True(!strings.Contains(string(b), "too large to retry")) // not retried for its own reason
		is.Equal(logLines(t, state, "once", "arrival"), 1)
		is.Equal(logLines(t, state, "once", "complete"), 0)
		is.Equal(retriesOf(srv, "once"), 0)
	})
}

// MaxBodyBytes (413) and BodyTimeout (408) hold while a body streams to a
// Process replica; BodyTimeout counts the time spent waiting for the
// client, not for a slow replica, and RequestTimeout the other way round;
// and the MaxBufferedBodyBytes budget counts retry buffers only, so a body
// larger than the whole budget streams.
func TestProcessBodyLimits(t *testing.T) {
	const retryBuf = 64 << 10
	c := newSingleHostCluster(t, 2)
	srv := serve.New(c, &serve.Options{MaxBodyBytes: 8 << 20, MaxBufferedBodyBytes: 256 << 10, RetryBufferBytes: retryBuf, BodyTimeout: 2 * time.Second})
	base, client := startServer(t, srv)
	if err := srv.Deploy(context.Background(), sinkDeployment(t, "lim", t.TempDir(), 1, true)); err != nil {
		t.Fatal(err)
	}
	quick := sinkDeployment(t, "quick", t.TempDir(), 1, true)
	quick.RequestTimeout = 250 * time.Millisecond
	if err := srv.Deploy(context.Background(), quick); err != nil {
		t.Fatal(err)
	}

	t.Run("Content-Length above MaxBodyBytes", func(t *testing.T) {
		is := is.New(t)
		code, b := upload(t, client, base+"/lim/sink", newBodyGen(9<<20), 9<<20, nil)
		is.Equal(code, http.StatusRequestEntityTooLarge)
		is.True(strings.Contains(string(b), "Options.MaxBodyBytes"))
	})
	t.Run("chunked body above MaxBodyBytes", func(t *testing.T) {
		is := is.New(t)
		// The client sends 64 KiB past the limit, made beforehand (so
		// that it is quick to send, well within BodyTimeout), then waits
		// for the answer: a client still writing when the server closes
		// the connection may see a reset before it reads the 413.
		body := &heldBody{r: bytes.NewReader(make([]byte, 8<<20+64<<10)), release: make(chan struct{})}
		defer close(body.release)
		code, b := upload(t, client, base+"/lim/sink", body, -1, nil)
		is.Equal(code, http.StatusRequestEntityTooLarge) // cut off while streaming
		is.True(strings.Contains(string(b), "Options.MaxBodyBytes"))
	})
	t.Run("slow client", func(t *testing.T) {
		is := is.New(t)
		pr, pw := io.Pipe()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := pw.Write(make([]byte, 64<<10)); err != nil {
				return
			}
			// 10 s of a byte every 100 ms: the write stops at the first
			// error, when the server has cut the body off.
			for range 100 {
				time.Sleep(100 * time.Millisecond)
				if _, err := pw.Write([]byte("x")); err != nil {
					return
				}
			}
			pw.Close()
		})
		defer wg.Wait()
		defer pr.Close()
		t0 := time.Now()
		code, b := upload(t, client, base+"/lim/sink", pr, -1, nil)
		is.Equal(code, http.StatusRequestTimeout)
		is.True(strings.Contains(string(b), "Options.BodyTimeout"))
		is.True(time.Since(t0) < 7*time.Second) // cut off at BodyTimeout's 2 s, not read for 10 s
	})
	t.Run("slow replica, a body larger than the budget", func(t *testing.T) {
		is := is.New(t)
		serve.BodyMemory(srv)
		gen := newBodyGen(4 << 20)
		t0 := time.Now()
		// 64 reads of 64 KiB, 40ms apart: more than BodyTimeout's 2 s.
		code, b := upload(t, client, base+"/lim/sink?delay=40ms", gen, 4<<20, nil)
		is.Equal(code, http.StatusOK)
		took := time.Since(t0)
		out := sinkOut(t, b)
		is.Equal(out.SHA256, gen.sum())
		is.True(took > 2*time.Second) // longer than BodyTimeout, yet not 408
		budget, _ := serve.BodyMemory(srv)
		is.True(budget <= retryBuf)
	})
	t.Run("RequestTimeout does not count the client's upload", func(t *testing.T) {
		is := is.New(t)
		// Four pieces 100ms apart: 300ms of waiting for the client, more
		// than the 250ms RequestTimeout, less than the 2s BodyTimeout.
		pr, pw := io.Pipe()
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 4 {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				if _, err := pw.Write(make([]byte, 16<<10)); err != nil {
					return
				}
			}
			pw.Close()
		})
		defer wg.Wait()
		defer pr.Close()
		code, b := upload(t, client, base+"/quick/sink", pr, 64<<10, nil)
		is.Equal(code, http.StatusOK)
		is.Equal(sinkOut(t, b).Bytes, int64(64<<10))
	})
	t.Run("RequestTimeout counts a slow replica", func(t *testing.T) {
		is := is.New(t)
		// 64 reads of 64 KiB, 100ms apart: 6.4 s, far more than the
		// 250ms RequestTimeout (and BodyTimeout's 2 s, which does not
		// count the replica's time). The body is made first, so that the
		// client is never slow to send it (the time the ingress waits for
		// the client's bytes moves the RequestTimeout on).
		body, err := io.ReadAll(newBodyGen(4 << 20))
		is.NoErr(err)
		code, b := upload(t, client, base+"/quick/sink?delay=100ms", bytes.NewReader(body), 4<<20, nil)
		is.Equal(code, http.StatusGatewayTimeout)
		is.True(strings.Contains(string(b), "deadline exceeded"))
		// A RequestTimeout that did not count the replica's time would let
		// it read the whole body and answer 200; no bound on the time
		// taken, which the machine's load decides.
	})
}
