package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
)

// fastHeadSeeds are request heads (and bodies) on both sides of the
// subset a fastServer takes.
var fastHeadSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /echo HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"POST /llm/v1/chat?x=1&y=%20 HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\nx-custom-header:   spaced value \t \r\n\r\nabc",
	"PUT /a/b/../c HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 0\r\n\r\n",
	"DELETE /%2e%2e/x HTTP/1.1\r\nHost: h\r\nAccept: a\r\nAccept: b\r\naccept: c\r\n\r\n",
	"PATCH /p HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	"OPTIONS /o HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Utf8: caf\xc3\xa9\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Ctl: a\x01b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Del: a\x7fb\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nBad(Name): v\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Fold: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\n Host: h\r\n\r\n",
	"GET / HTTP/1.1\nHost: h\n\n",
	"GET / HTTP/1.1\r\nHost: h\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost:\r\n\r\n",
	"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.2\r\nHost: h\r\n\r\n",
	"GET /  HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
	"get / HTTP/1.1\r\nHost: h\r\n\r\n",
	"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
	"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET http://h/x HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 003\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length:  3 \r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3,3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\n\r\nnot a body",
	"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\r\n\r\n",
}

// checkFastHead checks that what parseFastHead takes of raw, net/http's
// server takes too, as the same request.
func checkFastHead(t *testing.T, raw []byte) {
	t.Helper()
	end, bad := headEnd(raw)
	if bad || end == 0 {
		return
	}
	h, ok := parseFastHead(raw[:end])
	if !ok {
		return
	}
	if int64(len(raw)-end) < h.contentLength {
		return // the rest of the body has not arrived: not taken yet
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("the fast path takes %q; http.ReadRequest refuses it: %v", raw, err)
	}
	// What net/http's server checks beyond ReadRequest (server.go's
	// readRequest): one valid Host, valid header names and values.
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	_, _ = tp.ReadLine()
	all, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("the fast path takes %q; textproto refuses its header: %v", raw, err)
	}
	if hosts := all["Host"]; len(hosts) != 1 || !validFastHost(hosts[0]) || hosts[0] != req.Host {
		t.Fatalf("the fast path takes %q with Host %q", raw, hosts)
	}
	for k, vs := range req.Header {
		if !validName([]byte(k)) {
			t.Fatalf("the fast path takes %q with header name %q", raw, k)
		}
		for _, v := range vs {
			if !validValue([]byte(v)) {
				t.Fatalf("the fast path takes %q with header value %q", raw, v)
			}
		}
	}
	got := map[string]any{"method": h.method, "uri": h.target, "url": h.url, "host": h.host,
		"header": h.header, "length": h.contentLength, "close": h.close}
	want := map[string]any{"method": req.Method, "uri": req.RequestURI, "url": req.URL, "host": req.Host,
		"header": req.Header, "length": req.ContentLength, "close": req.Close}
	if req.Proto != "HTTP/1.1" || len(req.TransferEncoding) > 0 {
		t.Fatalf("the fast path takes %q: %s %v", raw, req.Proto, req.TransferEncoding)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfast path %#v\nnet/http  %#v", raw, got, want)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil || !bytes.Equal(body, raw[end:end+int(h.contentLength)]) {
		t.Fatalf("%q: body %q (%v), the fast path's %q", raw, body, err, raw[end:end+int(h.contentLength)])
	}
}

func TestFastHeadAsNetHTTP(t *testing.T) {
	taken := 0
	for _, s := range fastHeadSeeds {
		checkFastHead(t, []byte(s))
		if end, bad := headEnd([]byte(s)); !bad && end > 0 {
			if _, ok := parseFastHead([]byte(s)[:end]); ok {
				taken++
			}
		}
	}
	// the seeds are not all refused: the comparison ran
	if taken < 10 {
		t.Fatalf("the fast path took %d of the seeds", taken)
	}
	// Refused, each for its own reason.
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX-Fold: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
	} {
		end, bad := headEnd([]byte(s))
		if bad || end == 0 {
			t.Fatalf("%q: no head found", s)
		}
		if _, ok := parseFastHead([]byte(s)[:end]); ok {
			t.Errorf("the fast path takes %q", s)
		}
	}
	if _, bad := headEnd([]byte("GET / HTTP/1.1\nHost: h\n\n")); !bad {
		t.Error("a bare LF is not noticed")
	}
}

// FuzzFastHead: whatever the fast path takes, net/http takes as the same
// request.
//
//	go test ./serve -run '^$' -fuzz FuzzFastHead -fuzztime 1m
func FuzzFastHead(f *testing.F) {
	for _, s := range fastHeadSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkFastHead(t, raw) })
}

// twoServers serves h with a fastServer and with net/http's server alone,
// on loopback; it returns their addresses and the fastServer.
func twoServers(t *testing.T, h http.Handler, edit ...func(*fastServer)) (fast, plain string, fs *fastServer) {
	t.Helper()
	quiet := log.New(io.Discard, "", 0)
	lf, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs = newFastServer(lf, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, ErrorLog: quiet}, nil)
	for _, e := range edit {
		e(fs)
	}
	served := make(chan error, 1)
	go func() { served <- fs.serve() }()
	lp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &http.Server{Handler: h, ErrorLog: quiet}
	go ps.Serve(lp)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fs.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		fs.fallback.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		ps.Shutdown(ctx)
	})
	return lf.Addr().String(), lp.Addr().String(), fs
}

// exchange is what a client saw of one request on a connection.
type exchange struct {
	Status  int
	Header  http.Header
	Body    string
	BodyErr bool // the body broke off
	Err     bool // no response
	Closed  bool // the connection was closed after it
	Interim []int
}

// roundTrips sends each raw request on one connection to addr, the next
// after the response to the last, and returns what came back.
func roundTrips(t *testing.T, addr string, reqs ...string) []exchange {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	var out []exchange
	for _, raw := range reqs {
		if _, err := io.WriteString(c, raw); err != nil {
			out = append(out, exchange{Err: true})
			break
		}
		method, _, _ := strings.Cut(raw, " ")
		var ex exchange
		for {
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				ex.Err = true
				break
			}
			if resp.StatusCode >= 100 && resp.StatusCode < 200 {
				ex.Interim = append(ex.Interim, resp.StatusCode)
				continue
			}
			ex.Status = resp.StatusCode
			body, err := io.ReadAll(resp.Body)
			ex.Body, ex.BodyErr = string(body), err != nil
			ex.Header = resp.Header
			ex.Closed = resp.Close
			delete(ex.Header, "Date")
			// framing differs (net/http chunks beyond 2 KiB); the body is compared
			delete(ex.Header, "Content-Length")
			break
		}
		out = append(out, ex)
		if ex.Err || ex.Closed || ex.BodyErr {
			break
		}
	}
	return out
}

// fastHandlers answer as differently as handlers do.
var fastHandlers = map[string]http.HandlerFunc{
	"small": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") },
	"json": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"a":1}`)
	},
	"nocontent": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "5")
		w.WriteHeader(http.StatusNoContent)
		_, err := io.WriteString(w, "hello")
		if !errors.Is(err, http.ErrBodyNotAllowed) {
			panic(err)
		}
	},
	"notmodified": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	},
	"large": func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("0123456789abcdef", 64)
		for range 100 {
			io.WriteString(w, chunk)
		}
	},
	"flush": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: b\n\n")
		http.NewResponseController(w).Flush()
	},
	"flushfirst": func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).Flush()
		io.WriteString(w, "<html><body>late</body></html>")
	},
	"length": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	},
	"lengthlong": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		_, err := io.WriteString(w, "hello")
		w.Header().Set("X-Err", fmt.Sprint(err)) // after WriteHeader: not sent
	},
	"lengthshort": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "hello")
	},
	"badlength": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "abc")
		io.WriteString(w, "hello")
	},
	"headers": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Newline", "a\nb\r\nc")
		w.Header()["X-Space"] = []string{"  padded\t"}
		w.Header()["Bad Name"] = []string{"v"}
		w.Header()["X-Multi"] = []string{"1", "2"}
		w.Header()["X-Nil"] = nil
		w.Header().Set("Date", "Tue, 01 Dec 2026 00:00:00 GMT")
		io.WriteString(w, "x")
	},
	"status": func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
		io.WriteString(w, "odd")
	},
	"interim": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusTeapot) // superfluous
		io.WriteString(w, "done")
	},
	"close": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	},
	"sniff": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<!DOCTYPE html><html></html>") },
	"encoded": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		io.WriteString(w, "\x1f\x8b not really")
	},
	"typenil": func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		io.WriteString(w, "<html></html>")
	},
	"empty": func(w http.ResponseWriter, r *http.Request) {},
	"abort": func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		panic(http.ErrAbortHandler)
	},
	"panics": func(w http.ResponseWriter, r *http.Request) { panic("boom") },
	"identity": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "identity")
		io.WriteString(w, "streamed")
		w.(http.Flusher).Flush()
	},
	"chunkedset": func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		io.WriteString(w, "chunks")
	},
	"echo": func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	},
	"request": func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, hasServer := r.Context().Value(http.ServerContextKey).(*http.Server)
		json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "url": r.URL.String(), "uri": r.RequestURI, "host": r.Host,
			"proto": r.Proto, "header": r.Header, "length": r.ContentLength, "close": r.Close,
			"remote": host, "nobody": r.Body == http.NoBody, "server": hasServer,
			"local": r.Context().Value(http.LocalAddrContextKey) != nil,
		})
	},
	"unread": func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored the body") },
}

func fastMux() http.Handler {
	mux := http.NewServeMux()
	for name, h := range fastHandlers {
		mux.Handle("/"+name, h)
	}
	return mux
}

// TestFastResponsesAsNetHTTP sends the same requests to a fastServer and
// to net/http's server with the same handlers, and compares what a client
// sees: status, interim responses, header (but Date and the body's
// framing), body, and whether the connection stays open for the next
// request.
func TestFastResponsesAsNetHTTP(t *testing.T) {
	fast, plain, fs := twoServers(t, fastMux())
	get := func(path string) string { return "GET /" + path + " HTTP/1.1\r\nHost: h\r\n\r\n" }
	for name := range fastHandlers {
		t.Run(name, func(t *testing.T) {
			reqs := []string{get(name), get("small")}
			switch name {
			case "echo", "unread":
				reqs[0] = "POST /" + name + " HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world"
			case "request":
				reqs[0] = "PUT /request?q=%20x&r HTTP/1.1\r\nHost: example.com:80\r\nx-lower: v\r\nX-Dup: 1\r\nX-Dup: 2\r\nContent-Length: 2\r\n\r\n{}"
				reqs = append(reqs, "GET /request HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
			}
			want := roundTrips(t, plain, reqs...)
			got := roundTrips(t, fast, reqs...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("fast path:\n%+v\nnet/http:\n%+v", got, want)
			}
		})
	}
	if fs.fastRequests.Load() < int64(len(fastHandlers)) || fs.handoffs.Load() != 0 {
		t.Fatalf("fast path served %d requests, handed off %d connections", fs.fastRequests.Load(), fs.handoffs.Load())
	}
}

// TestFastHandsOffWhatItDoesNotTake: requests outside the subset are
// answered by net/http's server on the same connection, from that request
// on, with the bytes the fast path read first.
func TestFastHandsOffWhatItDoesNotTake(t *testing.T) {
	fast, plain, fs := twoServers(t, fastMux())
	small := "GET /small HTTP/1.1\r\nHost: h\r\n\r\n"
	for _, tc := range []struct{ name, req string }{
		{"chunked", "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{"http10", "GET /request HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n"},
		{"continue", "POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"},
		{"bare LF", "GET /request HTTP/1.1\nHost: h\n\n"},
		{"no host", "GET /small HTTP/1.1\r\n\r\n"},
		{"head", "HEAD /large HTTP/1.1\r\nHost: h\r\n\r\n"},
		{"large head", "GET /request HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\n\r\n"},
		{"large body", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("c", 70000)},
		{"both lengths", "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			before := fs.handoffs.Load()
			want := roundTrips(t, plain, small, tc.req, small)
			got := roundTrips(t, fast, small, tc.req, small)
			is.Equal(got, want)
			is.Equal(fs.handoffs.Load(), before+1)
		})
	}
}

// TestFastSlowBody: a body that does not come with its head is waited for
// a little (bodyGrace), then the connection goes to net/http's server,
// which reads the rest; the request is answered whole either way.
func TestFastSlowBody(t *testing.T) {
	for _, tc := range []struct {
		name       string
		grace      time.Duration
		noTimeouts bool
		handoffs   int64
	}{
		{"within the grace", time.Minute, false, 0},
		{"after it", 20 * time.Millisecond, false, 1},
		// the body's wait leaves no deadline behind for the next request
		{"no server timeouts", time.Second, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			fast, _, fs := twoServers(t, fastMux(), func(fs *fastServer) {
				fs.bodyGrace = tc.grace
				if tc.noTimeouts {
					fs.headerTimeout, fs.idleTimeout = 0, 0
				}
			})
			c, err := net.Dial("tcp", fast)
			is.NoErr(err)
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			send := func(s string) {
				_, err := io.WriteString(c, s)
				is.NoErr(err)
			}
			read := func() string {
				resp, err := http.ReadResponse(br, nil)
				is.NoErr(err)
				b, err := io.ReadAll(resp.Body)
				is.NoErr(err)
				return string(b)
			}
			send("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello")
			time.Sleep(100 * time.Millisecond) // the rest comes later
			send("world")
			is.Equal(read(), "helloworld")
			if tc.noTimeouts {
				time.Sleep(tc.grace + 200*time.Millisecond) // past the body's wait
			}
			send("GET /small HTTP/1.1\r\nHost: h\r\n\r\n")
			is.Equal(read(), "hello")
			is.Equal(fs.handoffs.Load(), tc.handoffs)
		})
	}
}

// TestFastPipelined: requests sent together are answered in order.
func TestFastPipelined(t *testing.T) {
	is := is.New(t)
	fast, _, fs := twoServers(t, fastMux())
	c, err := net.Dial("tcp", fast)
	is.NoErr(err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nA"+
		"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nB"+
		"GET /small HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	is.NoErr(err)
	br := bufio.NewReader(c)
	for _, want := range []string{"A", "B", "hello"} {
		resp, err := http.ReadResponse(br, nil)
		is.NoErr(err)
		b, err := io.ReadAll(resp.Body)
		is.NoErr(err)
		is.Equal(string(b), want)
	}
	_, err = br.ReadByte()
	is.Equal(err, io.EOF) // closed after Connection: close
	is.Equal(fs.fastRequests.Load(), int64(3))
}

// TestFastClientGoneCancels: a client that goes away while its request's
// handler runs ends the request's context, as with net/http's server.
func TestFastClientGoneCancels(t *testing.T) {
	is := is.New(t)
	started, ended := make(chan struct{}), make(chan error, 1)
	fast, _, _ := twoServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(20 * time.Second):
			ended <- errors.New("the context did not end")
		}
	}))
	c, err := net.Dial("tcp", fast)
	is.NoErr(err)
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	is.NoErr(err)
	<-started
	c.Close()
	is.Equal(<-ended, context.Canceled)
}

// TestFastWatchKeepsPipelinedByte: the watch of a long request reads the
// first byte of the next request, which is then served.
func TestFastWatchKeepsPipelinedByte(t *testing.T) {
	is := is.New(t)
	release := make(chan struct{})
	var once sync.Once
	fast, _, fs := twoServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			once.Do(func() { <-release })
		}
		io.WriteString(w, r.URL.Path)
	}))
	c, err := net.Dial("tcp", fast)
	is.NoErr(err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	is.NoErr(err)
	waitFor(t, "the watch started", func() bool { return fs.watches.Load() == 1 })
	_, err = io.WriteString(c, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	is.NoErr(err)
	waitFor(t, "the watch read a byte", func() bool { return fs.peeks.Load() == 1 })
	close(release)
	br := bufio.NewReader(c)
	for _, want := range []string{"/slow", "/next"} {
		resp, err := http.ReadResponse(br, nil)
		is.NoErr(err)
		b, err := io.ReadAll(resp.Body)
		is.NoErr(err)
		is.Equal(string(b), want)
	}
}

// TestFastShutdown: shutdown closes idle connections at once, lets a
// request in its handler finish (its response says Connection: close),
// and returns when every connection is closed.
func TestFastShutdown(t *testing.T) {
	is := is.New(t)
	started, release := make(chan struct{}), make(chan struct{})
	lf, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	fs := newFastServer(lf, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "ok")
	}), IdleTimeout: time.Minute}, nil)
	served := make(chan error, 1)
	go func() { served <- fs.serve() }()
	idle, err := net.Dial("tcp", lf.Addr().String())
	is.NoErr(err)
	defer idle.Close()
	is.Equal(len(roundTripsOn(t, idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")), 1)
	busy, err := net.Dial("tcp", lf.Addr().String())
	is.NoErr(err)
	defer busy.Close()
	_, err = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	is.NoErr(err)
	<-started
	down := make(chan error, 1)
	go func() { down <- fs.shutdown(context.Background()) }()
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = idle.Read(make([]byte, 1))
	is.Equal(err, io.EOF) // the idle connection is closed
	is.Equal(<-served, http.ErrServerClosed)
	close(release)
	_ = busy.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	is.NoErr(err)
	is.True(resp.Close)
	is.NoErr(<-down)
	_, err = net.Dial("tcp", lf.Addr().String())
	is.True(err != nil) // no longer listening
}

// roundTripsOn sends raw on c and reads one response.
func roundTripsOn(t *testing.T, c net.Conn, raw string) []*http.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	_ = c.SetDeadline(time.Time{})
	return []*http.Response{resp}
}

// TestFastIdleTimeout: an idle connection is closed after about
// IdleTimeout; a head that does not end within ReadHeaderTimeout closes
// the connection.
func TestFastTimeouts(t *testing.T) {
	is := is.New(t)
	lf, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	fs := newFastServer(lf, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}, nil)
	served := make(chan error, 1)
	go func() { served <- fs.serve() }()
	defer func() {
		is.NoErr(fs.shutdown(context.Background()))
		<-served
	}()
	for _, first := range []string{"", "GET / HTTP/1.1\r\nHo"} {
		c, err := net.Dial("tcp", lf.Addr().String())
		is.NoErr(err)
		start := time.Now()
		_, err = io.WriteString(c, first)
		is.NoErr(err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		is.Equal(err, io.EOF)
		is.True(time.Since(start) >= 150*time.Millisecond)
		c.Close()
	}
}

// TestFastIdleConnectionsHoldLittle: the buffers grown for a large
// request and a large response are let go once it is answered.
func TestFastIdleConnectionsHoldLittle(t *testing.T) {
	is := is.New(t)
	fast, _, fs := twoServers(t, fastMux())
	c, err := net.Dial("tcp", fast)
	is.NoErr(err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	body := strings.Repeat("b", 40<<10)
	for _, req := range []string{
		"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 40960\r\n\r\n" + body,
		"GET /large HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		_, err := io.WriteString(c, req)
		is.NoErr(err)
		resp, err := http.ReadResponse(br, nil)
		is.NoErr(err)
		b, err := io.ReadAll(resp.Body)
		is.NoErr(err)
		is.True(len(b) >= 40<<10)
	}
	held := 0
	waitFor(t, "the connection idle", func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for fc := range fs.conns {
			if fc.state.Load() != connIdle {
				return false
			}
			// idle: its goroutine waits for the next request
			held = cap(fc.out) + cap(fc.body) + len(fc.buf)
			return true
		}
		return false
	})
	is.True(held <= fastBufSize+2*fastKeep) // 100 KiB were needed
}
