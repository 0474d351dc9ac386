package dashboard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
)

// With a token, every request needs it: none or a wrong one is a 401
// whose body says nothing about the cluster; the right one is served.
func TestTokenRequired(t *testing.T) {
	is := is.New(t)
	token, err := dashboard.NewToken()
	is.NoErr(err)
	is.True(len(token) >= 40) // 32 random bytes
	other, err := dashboard.NewToken()
	is.NoErr(err)
	is.True(other != token)
	d, err := dashboard.New(cluster(t), &dashboard.Options{Token: token})
	is.NoErr(err)
	srv := serveHandler(t, d)
	for _, tt := range []struct {
		name, header string
		code         int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "Bearer " + other, http.StatusUnauthorized},
		{"token without Bearer", token, http.StatusUnauthorized},
		{"a prefix of the token", "Bearer " + token[:10], http.StatusUnauthorized},
		{"the token", "Bearer " + token, http.StatusOK},
	} {
		for _, path := range []string{"/", "/api/view", "/api/events", "/metrics", "/nothing"} {
			t.Run(tt.name+" "+path, func(t *testing.T) {
				is := is.New(t)
				req, err := http.NewRequest("GET", srv+path, nil)
				is.NoErr(err)
				if tt.header != "" {
					req.Header.Set("Authorization", tt.header)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				resp, err := http.DefaultClient.Do(req.WithContext(ctx))
				is.NoErr(err)
				defer resp.Body.Close()
				if tt.code == http.StatusUnauthorized {
					body, err := io.ReadAll(resp.Body)
					is.NoErr(err)
					is.Equal(resp.StatusCode, http.StatusUnauthorized)
					is.Equal(string(body), "unauthorized\n") // nothing about the cluster
					is.Equal(resp.Header.Get("WWW-Authenticate"), `Bearer realm="goray"`)
					return
				}
				want := http.StatusOK
				if path == "/nothing" {
					want = http.StatusNotFound
				}
				is.Equal(resp.StatusCode, want)
			})
		}
	}
}

// serveHandler serves h on loopback until the test ends and returns its
// base URL.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String()
}

// Serve refuses an address that is not loopback without a token, and
// closes its listener; with a token it serves there, to the token only.
func TestServeOffLoopbackNeedsToken(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	is.NoErr(err)
	err = d.Serve(t.Context(), ln)
	is.True(err != nil)
	is.True(strings.Contains(err.Error(), "Options.Token is empty")) // says what to set
	_, err = ln.Accept()
	is.True(err != nil) // closed

	d, err = dashboard.New(c, &dashboard.Options{Token: "s3cret"})
	is.NoErr(err)
	ln, err = net.Listen("tcp", "0.0.0.0:0")
	is.NoErr(err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln) }()
	port := ln.Addr().(*net.TCPAddr).Port
	req, err := http.NewRequest("GET", "http://127.0.0.1:"+strconv.Itoa(port)+"/api/view", nil)
	is.NoErr(err)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	is.NoErr(err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	is.Equal(resp.StatusCode, http.StatusOK)
	cancel()
	is.NoErr(<-done)
	http.DefaultClient.CloseIdleConnections()
}
