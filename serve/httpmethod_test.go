package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// An actor's serve.HTTP method serves any method and path below the
// deployment with the query, headers and body, and answers with its
// status, headers and body; POST /<name> still reaches Unary. In process
// and with the actors in worker processes.
func TestHTTPMethods(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testHTTPMethods(t, newSingleHostCluster(t, 2)) })
	t.Run("worker processes", func(t *testing.T) {
		b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 2}}},
			&local.Options{Processes: &local.ProcessOptions{}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := ray.NewCluster(t.Context(), b, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		testHTTPMethods(t, c)
	})
}

func testHTTPMethods(t *testing.T, c *ray.Cluster) {
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is := is.New(t)
	is.NoErr(srv.Deploy(context.Background(), serve.Deployment{Name: "api",
		Replica:     serve.Actor(echoClass, "api:", serve.Unary(echoCall), serve.HTTP(echoHTTP)),
		Accelerator: "v6e", Topology: "2x2"}))
	is.NoErr(srv.Deploy(context.Background(), serve.Deployment{Name: "rest",
		Replica:     serve.Actor(echoClass, "rest:", serve.HTTP(echoHTTP)),
		Accelerator: "v6e", Topology: "2x2"}))

	do := func(t *testing.T, method, url, body string, header http.Header) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, url, resp.StatusCode, b, err)
		}
		return resp, got
	}
	t.Run("GET the deployment", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "GET", base+"/api", "", nil)
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(got["method"], "GET")
		is.Equal(got["path"], "/")
		is.Equal(resp.Header.Get("X-Served-By"), "api:")
	})
	t.Run("a REST path with query and headers", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "GET", base+"/api/v1/items/7?x=1&x=2", "", http.Header{"X-Token": {"t"}, "Connection": {"X-Hop"}, "X-Hop": {"h"}})
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(got["path"], "/v1/items/7")
		is.Equal(got["query"], map[string]any{"x": []any{"1", "2"}})
		is.Equal(got["token"], "t")
		is.Equal(got["hop"], "") // hop-by-hop: named in Connection
	})
	t.Run("a POST with its status and body", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "POST", base+"/api/items", "raw bytes", nil)
		is.Equal(resp.StatusCode, http.StatusCreated)
		is.Equal(got["body"], "raw bytes")
	})
	t.Run("POST /<name> is still Unary", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "POST", base+"/api", `{"Text":"u"}`, nil)
		is.Equal(resp.StatusCode, http.StatusOK)
		is.Equal(got["Text"], "api:u")
	})
	t.Run("an error's status", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "DELETE", base+"/api/missing", "", nil)
		is.Equal(resp.StatusCode, http.StatusNotFound)
		is.True(strings.Contains(got["error"].(string), "no such item"))
	})
	t.Run("a deployment of HTTP only", func(t *testing.T) {
		is := is.New(t)
		resp, got := do(t, "POST", base+"/rest", `{"a":1}`, nil)
		is.Equal(resp.StatusCode, http.StatusCreated)
		is.Equal(got["body"], `{"a":1}`)
		is.Equal(got["path"], "/")
	})
}
