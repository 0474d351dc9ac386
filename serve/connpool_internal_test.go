package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
)

// poolServer is an HTTP server for connPool's tests that counts the
// connections it accepted and those closed.
func poolServer(t *testing.T, h http.HandlerFunc) (srv *httptest.Server, opened, closed *atomic.Int64) {
	opened, closed = new(atomic.Int64), new(atomic.Int64)
	srv = httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, opened, closed
}

func poolRequest(t *testing.T, ctx context.Context, p *connPool, method, rawURL, body string) (*http.Response, []byte, error) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	fr := &forwardReq{method: method, uri: u.RequestURI(), header: http.Header{}, dst: http.Header{}}
	if body != "" {
		fr.body = []byte(body)
	}
	resp, err := p.roundTrip(ctx, u.Host, fr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// waitFor polls cond (the server's connection states arrive on its own
// goroutines) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The proxy's own client keeps one connection for sequential requests,
// passes bodies both ways (streamed, chunked responses included), skips
// informational responses, and does not reuse a connection its server
// said it closes.
func TestConnPoolReuse(t *testing.T) {
	srv, opened, _ := poolServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/early":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		case "/close":
			w.Header().Set("Connection", "close")
		case "/chunks":
			for i := range 3 {
				_, _ = io.WriteString(w, "chunk")
				_ = http.NewResponseController(w).Flush()
				_ = i
			}
			return
		}
		_, _ = w.Write(append([]byte(r.Method+" "), b...))
	})
	p := newConnPool()
	defer p.close()
	ctx := context.Background()
	for _, tc := range []struct{ method, path, body, want string }{
		{"POST", "/", `{"a":1}`, `POST {"a":1}`},
		{"GET", "/x?q=1", "", "GET "},
		{"POST", "/early", "e", "POST e"},
		{"GET", "/chunks", "", "chunkchunkchunk"},
		{"PUT", "/", "", "PUT "},
	} {
		resp, b, err := poolRequest(t, ctx, p, tc.method, srv.URL+tc.path, tc.body)
		is := is.New(t)
		is.NoErr(err)
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(string(b), tc.want)
	}
	is := is.New(t)
	is.Equal(opened.Load(), int64(1)) // one connection for all
	for range 3 {
		_, b, err := poolRequest(t, ctx, p, "POST", srv.URL+"/close", "c")
		is.NoErr(err)
		is.Equal(string(b), "POST c")
	}
	is.Equal(opened.Load(), int64(3)) // the first, which closes after its answer; then a new one each
}

// A connection its server closed while idle is not used again: a POST,
// which may not be sent twice, still succeeds.
func TestConnPoolServerClosedIdle(t *testing.T) {
	srv, opened, _ := poolServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	p := newConnPool()
	defer p.close()
	ctx := context.Background()
	for i := range 20 {
		is := is.New(t)
		_, b, err := poolRequest(t, ctx, p, "POST", srv.URL, "x")
		is.NoErr(err)
		is.Equal(string(b), "ok")
		srv.CloseClientConnections()
		waitFor(t, "the connection closed", func() bool { return opened.Load() == int64(i+1) })
	}
}

// waitingServer is a poolServer that answers "ok" once it has read the
// body, for "/wait" only after the request's context ends (or the test
// ends).
func waitingServer(t *testing.T) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	release := make(chan struct{})
	srv, opened, closed := poolServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then a closed connection ends r's context
		if r.URL.Path == "/wait" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	})
	t.Cleanup(func() { close(release) }) // before the server's close (cleanups run last first)
	return srv, opened, closed
}

// A request whose context ends while it waits for the response returns
// at once; its connection is closed, not reused. Closing the pool closes
// the idle connections.
func TestConnPoolCancel(t *testing.T) {
	srv, opened, closed := waitingServer(t)
	p := newConnPool()
	is := is.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := poolRequest(t, ctx, p, "POST", srv.URL+"/wait", "x")
	is.True(err != nil)
	is.Equal(ctx.Err(), context.DeadlineExceeded)
	waitFor(t, "the cancelled request's connection closed", func() bool { return closed.Load() == 1 })
	_, b, err := poolRequest(t, context.Background(), p, "GET", srv.URL, "")
	is.NoErr(err)
	is.Equal(string(b), "ok")
	is.Equal(opened.Load(), int64(2))
	p.close()
	waitFor(t, "the idle connection closed", func() bool { return closed.Load() == 2 })
	// A response whose body is not read to its end closes its connection.
	p = newConnPool()
	defer p.close()
	resp, err := p.roundTrip(context.Background(), srv.Listener.Addr().String(), &forwardReq{method: "GET", uri: "/"})
	is.NoErr(err)
	is.NoErr(resp.Body.Close())
	waitFor(t, "the unread response's connection closed", func() bool { return closed.Load() == 3 })
}

// A request's lazy deadline (withDeadline, nothing watching it) is kept
// on the connection: it interrupts a slow answer at the deadline, and Err
// says so; the parent's end interrupts too; a connection whose request
// ended in time goes back to the pool with its deadline cleared, and
// serves the next request after that deadline has passed.
func TestConnPoolDeadlineCtx(t *testing.T) {
	srv, opened, closed := waitingServer(t)
	p := newConnPool()
	defer p.close()
	is := is.New(t)
	_, _, err := poolRequest(t, context.Background(), p, "POST", srv.URL, "") // dials (which watches its context)
	is.NoErr(err)

	ctx, cancel := withDeadline(context.Background(), 200*time.Millisecond)
	_, b, err := poolRequest(t, ctx, p, "POST", srv.URL, "x")
	is.NoErr(err)
	is.Equal(string(b), "ok")
	_, _, lazy := ctx.unwatched()
	is.True(lazy) // no timer was started for it
	cancel()
	time.Sleep(300 * time.Millisecond) // past the first request's deadline
	ctx, cancel = withDeadline(context.Background(), time.Minute)
	_, b, err = poolRequest(t, ctx, p, "POST", srv.URL, "y")
	cancel()
	is.NoErr(err)
	is.Equal(string(b), "ok")
	is.Equal(opened.Load(), int64(1)) // the same connection

	ctx, cancel = withDeadline(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = poolRequest(t, ctx, p, "POST", srv.URL+"/wait", "z")
	is.True(err != nil)
	is.True(time.Since(start) < 30*time.Second)
	is.Equal(ctx.Err(), context.DeadlineExceeded)
	waitFor(t, "the timed-out request's connection closed", func() bool { return closed.Load() == 1 })

	parent, pcancel := context.WithCancel(context.Background())
	ctx, cancel = withDeadline(parent, time.Hour)
	defer cancel()
	go func() {
		waitFor(t, "the request sent", func() bool { return opened.Load() == 2 })
		pcancel()
	}()
	_, _, err = poolRequest(t, ctx, p, "POST", srv.URL+"/wait", "w")
	is.True(err != nil)
	is.Equal(ctx.Err(), context.Canceled)
	waitFor(t, "the cancelled request's connection closed", func() bool { return closed.Load() == 2 })
}
