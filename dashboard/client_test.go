package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

// serveDriver serves c's dashboard with token on loopback until the
// returned stop is called (or the test ends) and returns its address.
func serveDriver(t *testing.T, c *ray.Cluster, token string) (addr string, stop func()) {
	t.Helper()
	d, err := dashboard.New(c, &dashboard.Options{Token: token, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := dashboard.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Serve(ctx, ln); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// A client reads the driver's view with the token, says when the token is
// missing or wrong, and reports a driver that went away as gone.
func TestClientView(t *testing.T) {
	is := is.New(t)
	ctx := timeout(t)
	addr, stop := serveDriver(t, cluster(t), "tok")
	v, err := (&dashboard.Client{Addr: addr, Token: "tok"}).View(ctx)
	is.NoErr(err)
	is.True(len(v.Nodes) > 0)
	is.True(len(v.Shapes) > 0)
	v, err = (&dashboard.Client{Addr: "http://" + addr + "/", Token: "tok"}).View(ctx)
	is.NoErr(err) // a URL works too
	_, err = (&dashboard.Client{Addr: addr}).View(ctx)
	is.True(err != nil && strings.Contains(err.Error(), "wants a token (401)"))
	_, err = (&dashboard.Client{Addr: addr, Token: "nope"}).View(ctx)
	is.True(err != nil && strings.Contains(err.Error(), "refused the token (401)"))
	var gone *dashboard.GoneError
	is.True(!errors.As(err, &gone)) // a refused token is not a gone driver

	stop()
	_, err = (&dashboard.Client{Addr: addr, Token: "tok"}).View(ctx)
	is.True(errors.As(err, &gone)) // refused: gone
	is.True(strings.Contains(err.Error(), "the driver at "+addr+" is gone"))
}

// A driver that accepts the connection and never answers is gone once
// the client's timeout passes: goray status never hangs.
func TestClientDriverHangs(t *testing.T) {
	is := is.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close() // held open, never answered
		}
	}()
	c := &dashboard.Client{Addr: ln.Addr().String(), HTTP: &http.Client{Timeout: 200 * time.Millisecond}}
	_, err = c.View(timeout(t))
	var gone *dashboard.GoneError
	is.True(errors.As(err, &gone))
	_, err = (&dashboard.Client{Addr: "not a host:port:x"}).View(timeout(t))
	is.True(err != nil && strings.Contains(err.Error(), "want host:port or an http(s) URL"))
}

// The proxy serves the driver's page, view, events and metrics to a
// browser on this machine without the token, and once the driver is gone
// answers views that say so.
func TestClientProxy(t *testing.T) {
	is := is.New(t)
	ctx := timeout(t)
	addr, stop := serveDriver(t, cluster(t), "tok")
	client := &dashboard.Client{Addr: addr, Token: "tok"}
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.ServeProxy(pctx, ln) }()
	defer func() { cancel(); is.NoErr(<-done); http.DefaultClient.CloseIdleConnections() }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		is.NoErr(err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		is.NoErr(err)
		return resp, string(body)
	}
	resp, body := get("/")
	is.Equal(resp.StatusCode, 200)
	is.True(strings.Contains(body, "<html")) // the page
	resp, body = get("/metrics")
	is.Equal(resp.StatusCode, 200)
	is.True(strings.Contains(body, "goray_tpu_slices{"))
	resp, body = get("/api/view")
	is.Equal(resp.StatusCode, 200)
	var v dashboard.View
	is.NoErr(json.Unmarshal([]byte(body), &v))
	is.True(len(v.Nodes) > 0)
	stream, err := http.Get(base + "/api/events")
	is.NoErr(err)
	v = readEvent(t, bufio.NewReader(stream.Body))
	is.True(len(v.Nodes) > 0) // events pass through
	stream.Body.Close()

	stop()
	resp, body = get("/api/view")
	is.Equal(resp.StatusCode, http.StatusBadGateway)
	is.NoErr(json.Unmarshal([]byte(body), &v))
	is.Equal(len(v.Problems), 1)
	is.True(strings.Contains(v.Problems[0], "the driver at "+addr+" is gone"))
	stream, err = http.Get(base + "/api/events")
	is.NoErr(err)
	v = readEvent(t, bufio.NewReader(stream.Body))
	stream.Body.Close()
	is.True(strings.Contains(v.Problems[0], "is gone")) // the page shows it

	// The proxy adds the token for whoever reaches it: loopback only.
	off, err := net.Listen("tcp", "0.0.0.0:0")
	is.NoErr(err)
	err = client.ServeProxy(ctx, off)
	is.True(err != nil && strings.Contains(err.Error(), "loopback only"))
}
