package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/serve"
)

// The proxy in front of a Process replica behaves as a reverse proxy
// should (net/http/httputil.ReverseProxy, nginx): a connection that ends
// before the response began is retried on another replica, and the error
// when it cannot be never shows internal addresses; a response cut off
// midway is aborted, not ended as if complete; the path and query reach
// the server byte for byte; headers named in Connection are not
// forwarded (RFC 9110 7.6.1).
func TestProcessProxyEdges(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	exe, err := os.Executable()
	is.NoErr(err)
	d := serve.Deployment{
		Name: "edge",
		Replica: serve.Process(serve.ProcessSpec{
			Command:       []string{exe, "-test.run=^$"},
			WorkerCommand: []string{exe, "-test.run=^$"},
			Env:           map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": t.TempDir()},
			StopTimeout:   5 * time.Second,
		}),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MinReplicas: 2, Idempotent: true,
		Health: &serve.HealthCheck{Period: 20 * time.Millisecond},
	}
	is.NoErr(srv.Deploy(context.Background(), d))

	t.Run("closed before the response: retried", func(t *testing.T) {
		is := is.New(t)
		code, _, body := post(t, client, base+"/edge/flaky", map[string]int{})
		is.Equal(code, http.StatusOK)
		is.Equal(string(body), `{"ok":true}`)
	})
	t.Run("closed every time: no internal address", func(t *testing.T) {
		is := is.New(t)
		code, _, body := post(t, client, base+"/edge/eof", map[string]int{})
		t.Logf("%d %s", code, body)
		is.True(code == http.StatusBadGateway || code == http.StatusServiceUnavailable)
		var e map[string]string
		is.NoErr(json.Unmarshal(body, &e))
		is.True(e["error"] != "")
		is.True(!strings.Contains(string(body), "127.0.0.1"))
		is.True(!strings.Contains(string(body), "http://"))
	})
	t.Run("cut midway: aborted", func(t *testing.T) {
		is := is.New(t)
		resp, err := client.Get(base + "/edge/cut")
		is.NoErr(err)
		defer resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusOK)
		b, err := io.ReadAll(resp.Body)
		is.Equal(string(b), "data: 0\n\n") // what arrived before the cut
		is.True(err != nil)                // the client sees the cut
	})
	t.Run("redirects go to the client", func(t *testing.T) {
		// The router does not follow a replica's redirect (it would fetch
		// whatever URL the server names, from inside the cluster); a
		// Location into the server is rewritten below the deployment.
		noFollow := &http.Client{Transport: client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, tc := range []struct {
			path, location string
			code           int
		}{
			{"/edge/moved-abs", "/edge/events%2Fx?a=1", http.StatusTemporaryRedirect},
			{"/edge/moved", "/edge/events", http.StatusMovedPermanently},
			{"/edge/away", "http://169.254.169.254/computeMetadata/v1/", http.StatusFound},
		} {
			is := is.New(t)
			resp, err := noFollow.Get(base + tc.path)
			is.NoErr(err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			is.Equal(resp.StatusCode, tc.code)
			is.Equal(resp.Header.Get("Location"), tc.location)
		}
	})
	t.Run("path and query byte for byte", func(t *testing.T) {
		for _, p := range []string{"/raw/v1/%2e%2ex/health", "/raw/org%2Fmodel%3Fv%3D1?x=%2F&y", "/raw/echo/100%25", "/raw/a%20b/"} {
			is := is.New(t)
			req, err := http.NewRequest(http.MethodGet, base+"/edge"+p, nil)
			is.NoErr(err)
			req.Header.Set("Connection", "X-Secret")
			req.Header.Set("X-Secret", "1")
			resp, err := client.Do(req)
			is.NoErr(err)
			var got map[string]string
			is.NoErr(json.NewDecoder(resp.Body).Decode(&got))
			resp.Body.Close()
			is.Equal(resp.StatusCode, http.StatusOK)
			is.Equal(got["uri"], p)     // as the client sent it
			is.Equal(got["secret"], "") // named in Connection: hop-by-hop
		}
	})
}
