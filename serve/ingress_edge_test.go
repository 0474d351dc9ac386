package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/serve"
)

// rawExchange sends req on a new connection to addr, and returns the
// response and its body, and whether the server then closed the
// connection. A server that neither answers nor closes within a minute
// fails the test (the defects these tests guard against hang for ever).
func rawExchange(t *testing.T, addr, req string) (*http.Response, []byte, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatalf("write the request: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the response: %v (the server neither answered nor closed the connection)", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read the response's body: %v", err)
	}
	// Whatever the answer said, the connection is closed when a read
	// finds its end; a timeout means it was left open.
	_, err = br.ReadByte()
	var ne net.Error
	closed := errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && !(errors.As(err, &ne) && ne.Timeout()))
	if err == nil {
		t.Fatalf("bytes after the response")
	}
	return resp, body, closed
}

// The ingress's edges against hostile or broken clients (issue 37):
//   - a client that declares a body and sends it slowly is answered 408
//     at BodyTimeout and its connection closed, for actor and Process
//     replicas alike (the actor path used to clear the read deadline, and
//     net/http then waited for the rest of the body with none);
//   - a request with both Content-Length and Transfer-Encoding is refused
//     with 400 and its connection closed (RFC 9112 §6.1: request
//     smuggling behind a front proxy);
//   - a path with percent-encoded dot-segments (RFC 3986 §6.2.2) is
//     refused with 400 rather than passed on to a replica's server.
func TestIngressEdges(t *testing.T) {
	c := newSingleHostCluster(t, 2)
	srv := serve.New(c, &serve.Options{BodyTimeout: 500 * time.Millisecond, IdleTimeout: 5 * time.Minute})
	base, client := startServer(t, srv)
	addr := strings.TrimPrefix(base, "http://")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Deploy(context.Background(), serve.Deployment{
		Name: "echo", Replica: echoReplica("echo:"), Accelerator: "v6e", Topology: "2x2",
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Deploy(context.Background(), serve.Deployment{
		Name: "proc",
		Replica: serve.Process(serve.ProcessSpec{
			Command: []string{exe, "-test.run=^$"}, StopTimeout: 5 * time.Second,
			Env: map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": t.TempDir()},
		}),
		Accelerator: "v6e", Topology: "2x2",
	}); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/echo", "/proc/echo"} {
		t.Run("slow body past BodyTimeout "+path, func(t *testing.T) {
			is := is.New(t)
			// 1 byte of the 100 declared, then nothing: the server must not
			// wait for the rest once BodyTimeout has passed.
			resp, body, closed := rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
			is.Equal(resp.StatusCode, http.StatusRequestTimeout)
			is.True(strings.Contains(string(body), "Options.BodyTimeout"))
			is.True(resp.Close) // says so
			is.True(closed)     // and does
		})
	}

	smuggled := "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + "d\r\n{\"Text\":\"hi\"}\r\n0\r\n\r\n"
	for _, path := range []string{"/echo", "/proc/echo", "/-/healthz", "/nosuch"} {
		t.Run("Content-Length and Transfer-Encoding "+path, func(t *testing.T) {
			is := is.New(t)
			resp, body, closed := rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\n"+smuggled)
			t.Logf("%s %s", resp.Status, body)
			is.Equal(resp.StatusCode, http.StatusBadRequest)
			is.True(strings.Contains(string(body), "Content-Length and Transfer-Encoding"))
			is.True(resp.Close)
			is.True(closed)
		})
	}
	t.Run("requests on one connection before and after such a request", func(t *testing.T) {
		is := is.New(t)
		// Three pipelined requests: a chunked one and one with a
		// Content-Length, both answered on a connection kept open, then
		// one with both, refused and the connection closed.
		ok := "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + "d\r\n{\"Text\":\"hi\"}\r\n0\r\n\r\n" +
			"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"Text\":\"hi\"}\n"
		conn, err := net.Dial("tcp", addr)
		is.NoErr(err)
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		_, err = io.WriteString(conn, ok+"POST /echo HTTP/1.1\r\nHost: x\r\n"+smuggled)
		is.NoErr(err)
		br := bufio.NewReader(conn)
		for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusBadRequest} {
			resp, err := http.ReadResponse(br, nil)
			is.NoErr(err)
			b, err := io.ReadAll(resp.Body)
			is.NoErr(err)
			t.Logf("%d: %s %s", i, resp.Status, b)
			is.Equal(resp.StatusCode, want)
			is.Equal(resp.Close, i == 2)
		}
		_, err = br.ReadByte()
		is.True(errors.Is(err, io.EOF))
	})

	for _, p := range []string{
		"/proc/raw/%2e%2e/%2e%2e/health", "/proc/raw/%2E%2e/x", "/proc/raw/%2e/x", "/proc/raw/.%2e", "/proc/raw/%2e%2E",
		"/echo/%2e%2e/stream", "/proc/raw/a/%2e%2e%2fb",
	} {
		t.Run("dot-segments "+p, func(t *testing.T) {
			is := is.New(t)
			req, err := http.NewRequest(http.MethodGet, base+p, nil)
			is.NoErr(err)
			resp, err := client.Do(req)
			is.NoErr(err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			is.NoErr(err)
			t.Logf("%s %s", resp.Status, b)
			is.Equal(resp.StatusCode, http.StatusBadRequest)
			var e map[string]string
			is.NoErr(json.Unmarshal(b, &e))
			is.True(strings.Contains(e["error"], "dot-segment"))
		})
	}
	t.Run("dots that are not segments pass", func(t *testing.T) {
		for _, p := range []string{"/raw/a%2e%2eb", "/raw/%2e%2e%2e", "/raw/v1.2/x..y"} {
			is := is.New(t)
			resp, err := client.Get(base + "/proc" + p)
			is.NoErr(err)
			var got map[string]string
			is.NoErr(json.NewDecoder(resp.Body).Decode(&got))
			resp.Body.Close()
			is.Equal(resp.StatusCode, http.StatusOK)
			is.Equal(got["uri"], p)
		}
	})
}
