package serve_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/serve"
)

// Request bodies are bounded before they are read: one body by
// MaxBodyBytes (413), all bodies in memory by MaxBufferedBodyBytes (503,
// so 24 concurrent 32 MiB POSTs cannot take the driver to gigabytes), and
// the time to send one by BodyTimeout (408, so a body sent a byte at a time
// is cut off). A server's own http.Server closes idle connections.
func TestBodyLimits(t *testing.T) {
	c, _ := newCluster(t, 1)
	srv := serve.New(c, &serve.Options{MaxBodyBytes: 1 << 20, MaxBufferedBodyBytes: 1536 << 10, BodyTimeout: 300 * time.Millisecond, IdleTimeout: 200 * time.Millisecond})
	base, _ := startServer(t, srv)
	// Each request on a new connection, from a new Transport: the server
	// closes idle connections after 200 ms (IdleTimeout) and those whose
	// refused body it did not read, and a POST on a pooled connection it
	// has just closed fails its write ("use of closed network
	// connection"), which net/http does not retry for a POST. (Not
	// DisableKeepAlives: a request that says Connection: close gets no
	// read of its refused body before the close, so its client, still
	// writing, is reset instead of reading the answer.)
	fresh := func(t *testing.T) *http.Client {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	d := deployment("limits")
	if err := srv.Deploy(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	body := func(n int) io.Reader {
		return bytes.NewReader(append(append([]byte(`{"Text":"`), bytes.Repeat([]byte("x"), n)...), `"}`...))
	}

	t.Run("one body too large", func(t *testing.T) {
		is := is.New(t)
		resp, err := fresh(t).Post(base+"/limits", "application/json", body(2<<20))
		is.NoErr(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusRequestEntityTooLarge)
		is.True(strings.Contains(string(b), "Options.MaxBodyBytes"))
	})
	t.Run("bodies in memory at their limit", func(t *testing.T) {
		is := is.New(t)
		g := newGate("limits-held")
		done := make(chan int, 1)
		go func() {
			// 1 MiB of the 1.5 MiB budget, held while the call waits.
			in := strings.NewReader(`{"Text":"` + strings.Repeat("y", 1<<20-64) + `","Gate":"` + g + `"}`)
			resp, err := fresh(t).Post(base+"/limits", "application/json", in)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		gates.arrivals(t, g, 1)
		resp, err := fresh(t).Post(base+"/limits", "application/json", body(900<<10))
		is.NoErr(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusServiceUnavailable)
		is.True(strings.Contains(string(b), "Options.MaxBufferedBodyBytes"))
		code, _, _ := post(t, fresh(t), base+"/limits", EchoIn{Text: "small"}) // a small one fits
		is.Equal(code, http.StatusOK)
		gates.release(g)
		is.Equal(<-done, http.StatusOK)
		code, _, _ = post(t, fresh(t), base+"/limits", EchoIn{Text: strings.Repeat("z", 900<<10)}) // the budget is back
		is.Equal(code, http.StatusOK)
	})
	t.Run("slow body", func(t *testing.T) {
		is := is.New(t)
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(`{"Text":"`))
			// 6 s of a byte every 100 ms: the write stops at the first
			// error, when the server has cut the body off.
			for range 60 {
				time.Sleep(100 * time.Millisecond)
				if _, err := pw.Write([]byte("x")); err != nil {
					return
				}
			}
			pw.Write([]byte(`"}`))
			pw.Close()
		}()
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodPost, base+"/limits", pr)
		// On a connection of its own: a pooled one the server has just
		// closed (IdleTimeout, or after the 503 above) fails the write, and
		// net/http cannot retry a body it cannot rewind.
		one := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := one.Do(req)
		is.NoErr(err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pr.Close()
		is.Equal(resp.StatusCode, http.StatusRequestTimeout)
		is.True(strings.Contains(string(b), "Options.BodyTimeout"))
		is.True(time.Since(t0) < 4500*time.Millisecond) // cut off after BodyTimeout's 300 ms, not read for 6 s
	})
	t.Run("idle connection closed", func(t *testing.T) {
		is := is.New(t)
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		is.NoErr(err)
		defer conn.Close()
		_, err = conn.Write([]byte("GET /-/healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		is.NoErr(err)
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		all, err := io.ReadAll(conn)
		is.NoErr(err) // the server closed the keep-alive connection once idle (not our deadline)
		is.True(strings.HasPrefix(string(all), "HTTP/1.1 200"))
	})
}
