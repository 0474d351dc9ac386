package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
)

// goray status prints a running driver's summary with its token, says so
// when the token is wrong, and reports the driver gone once it has
// stopped, at once.
func TestStatusOfADriver(t *testing.T) {
	is := is.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := openCluster(ctx, clusterFile)
	is.NoErr(err)
	defer c.Close()
	d, err := dashboard.New(c, &dashboard.Options{Token: "tok"})
	is.NoErr(err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	addr := ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- d.Serve(sctx, ln) }()

	status := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(ctx, append([]string{"status", "--driver", addr}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := status("--token", "tok")
	is.Equal(code, exitOK)
	is.Equal(errOut, "")
	for _, want := range []string{"goray status at ", "Nodes: ", "TPU slices", "v6e 4x4 (4 chips per host)", "Work: 0 queued, 0 running"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	t.Setenv(tokenEnv, "tok")
	code, out, _ = status("--json")
	is.Equal(code, exitOK)
	var v dashboard.View
	is.NoErr(json.Unmarshal([]byte(out), &v))
	is.True(len(v.Shapes) > 0)
	code, _, errOut = status("--token", "wrong")
	is.Equal(code, exitError)
	is.True(strings.Contains(errOut, "refused the token (401)"))

	stop()
	is.NoErr(<-served)
	start := time.Now()
	code, _, errOut = status()
	is.Equal(code, exitError)
	is.True(strings.Contains(errOut, "goray: the driver at "+addr+" is gone"))
	is.True(time.Since(start) < 30*time.Second) // reported, not hung
}

// A driver that accepts connections and never answers is reported gone
// after --timeout.
func TestStatusOfAHungDriver(t *testing.T) {
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
			defer conn.Close()
		}
	}()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"status", "--driver", ln.Addr().String(), "--timeout", "200ms"}, &stdout, &stderr)
	is.Equal(code, exitError)
	is.True(strings.Contains(stderr.String(), "is gone"))
}

// goray dashboard --driver serves the driver's live page on loopback,
// adding the token, and refuses to start for a driver that is gone.
func TestDashboardOfADriver(t *testing.T) {
	is := is.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := openCluster(ctx, clusterFile)
	is.NoErr(err)
	defer c.Close()
	d, err := dashboard.New(c, &dashboard.Options{Token: "tok"})
	is.NoErr(err)
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	driver := ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- d.Serve(sctx, ln) }()

	runCtx, interrupt := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"dashboard", "--driver", driver, "--token", "tok", "--addr", "127.0.0.1:0"}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	is.NoErr(err)
	go io.Copy(io.Discard, pr)
	fields := strings.Fields(line) // "goray dashboard: the driver at ADDR on http://PROXY/ ..."
	is.True(len(fields) > 7)
	v, err := (&dashboard.Client{Addr: fields[7]}).View(ctx) // no token: the proxy adds it
	is.NoErr(err)
	is.True(len(v.Shapes) > 0)
	http.DefaultClient.CloseIdleConnections()
	interrupt()
	is.Equal(<-done, exitOK)
	is.Equal(stderr.String(), "")

	stop()
	is.NoErr(<-served)
	var out bytes.Buffer
	code := run(ctx, []string{"dashboard", "--driver", driver, "--token", "tok", "--addr", "127.0.0.1:0"}, &out, &stderr)
	is.Equal(code, exitError)
	is.True(strings.Contains(stderr.String(), "is gone"))
}
