package worker

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestLoneTaskRunsOnReader: a task that is the only request in flight
// (a synchronous round trip) runs on the connection's reader goroutine,
// not on a runner woken for it; one sent while another runs does not.
func TestLoneTaskRunsOnReader(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	// No heartbeat frame is buffered behind a request during the test.
	c := dialTest(t, addr, &ClientOptions{Heartbeat: time.Minute})
	ctx := context.Background()
	for range 3 {
		v, err := c.RunTask(ctx, "onreader", backend.Value{}, nil)
		is.NoErr(err)
		is.Equal(string(v.Data), "true") // lone: on the reader
	}
	bctx, cancel := context.WithCancel(ctx)
	blocked := startTask(bctx, c, "block", "x")
	<-blockStarted
	v, err := c.RunTask(ctx, "onreader", backend.Value{}, nil)
	is.NoErr(err)
	is.Equal(string(v.Data), "false") // another task runs: on a runner
	cancel()
	r := <-blocked
	is.Equal(r.err, context.Canceled)
}

// TestLoneTaskHandsOverReading: while a lone task runs on the reader, the
// reading goes on on another goroutine (the watch's): a request sent
// meanwhile runs and returns, and the cancellation of the lone task
// reaches it in the worker. Three times, each on the goroutine that took
// over the reading last; the connection's work ends cleanly after.
func TestLoneTaskHandsOverReading(t *testing.T) {
	is := is.New(t)
	addr, srv := startServer(t, nil)
	c := dialTest(t, addr, &ClientOptions{Heartbeat: time.Minute})
	ctx := context.Background()
	for range 3 {
		bctx, cancel := context.WithCancel(ctx)
		blocked := startTask(bctx, c, "block", "x")
		<-blockStarted
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		v, err := c.RunTask(wctx, "echo", backend.Value{Data: []byte("meanwhile")}, nil)
		wcancel()
		is.NoErr(err) // read and run while the lone task blocks
		is.Equal(string(v.Data), "meanwhile")
		cancel()
		r := <-blocked
		is.Equal(r.err, context.Canceled)
		// The worker's task saw its cancellation and returned.
		waitServer(srv, func(sc *serverConn) bool { return len(sc.running) == 0 })
	}
	c.Close()
	// The connection's work ends: the server forgets it.
	for {
		srv.mu.Lock()
		n := len(srv.conns)
		srv.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
}

// waitServer waits until ok holds, with sc.mu held, for every connection
// of srv.
func waitServer(srv *Server, ok func(sc *serverConn) bool) {
	for {
		all := true
		srv.mu.Lock()
		for sc := range srv.conns {
			sc.mu.Lock()
			all = all && ok(sc)
			sc.mu.Unlock()
		}
		srv.mu.Unlock()
		if all {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
