package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// fakeRegistry serves "echo" (returns its input), "big" (returns as many
// bytes as its input says), "block" (waits for its context) and
// "onreader" (says whether it runs on the connection's reader goroutine).
type fakeRegistry struct{}

var fakeEntries = []Entry{
	{Kind: KindTask, Name: "big", Signature: "func(int) []byte"},
	{Kind: KindTask, Name: "block", Signature: "func(string) string"},
	{Kind: KindTask, Name: "echo", Signature: "func(string) string"},
	{Kind: KindTask, Name: "onreader", Signature: "func() bool"},
}

func (fakeRegistry) Entries() []Entry { return fakeEntries }

func (fakeRegistry) Executor(codec string) (backend.Executor, error) {
	if codec != "raw" {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "no codec %q; have raw", codec)
	}
	return fakeExec{}, nil
}

type fakeExec struct{}

func (fakeExec) HasTask(name string) bool {
	return name == "echo" || name == "big" || name == "block" || name == "onreader"
}
func (fakeExec) HasActorMethod(class, method string) bool { return false }
func (fakeExec) NewActor(context.Context, string, backend.Value, *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return nil, errors.New("no actors")
}

func (fakeExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	switch name {
	case "big":
		var n int
		if err := json.Unmarshal(arg.Data, &n); err != nil {
			return backend.Value{}, err
		}
		return backend.Value{Data: make([]byte, n)}, nil
	case "block":
		// Tell a test that waits for it (one that does not waits for
		// the cancellation anyway): a send that gave up when no one
		// received yet lost the news for a test that was about to.
		select {
		case blockStarted <- struct{}{}:
		case <-ctx.Done():
		}
		<-ctx.Done()
		return backend.Value{}, ctx.Err()
	case "onreader":
		buf := make([]byte, 64<<10)
		stack := buf[:runtime.Stack(buf, false)]
		onReader := bytes.Contains(stack, []byte(").readLoop("))
		return backend.Value{Data: []byte(strconv.FormatBool(onReader))}, nil
	}
	return arg, nil
}

const testToken = "secret-token"

// blockStarted receives when a "block" task starts (the task waits
// for the receive, or for its cancellation).
var blockStarted = make(chan struct{})

var fakeManifest = Manifest{Codec: "raw", Entries: fakeEntries}

func startServer(t testing.TB, opts *ServerOptions) (addr string, srv *Server) {
	t.Helper()
	if opts == nil {
		opts = &ServerOptions{}
	}
	if opts.Token == "" {
		opts.Token = testToken
	}
	srv, err := NewServer(fakeRegistry{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, srv), srv
}

// serveOn serves srv on a loopback port until the test ends and returns
// its address.
func serveOn(t testing.TB, srv *Server) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ln.Addr().String()
}

func dialTest(t *testing.T, addr string, opts *ClientOptions) *Client {
	t.Helper()
	if opts == nil {
		opts = &ClientOptions{}
	}
	if opts.Token == "" {
		opts.Token = testToken
	}
	if opts.Manifest.Codec == "" {
		opts.Manifest = fakeManifest
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoWorks checks that a client still gets answers.
func echoWorks(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.RunTask(ctx, "echo", backend.Value{Data: []byte("ping")}, nil)
	if err != nil || string(v.Data) != "ping" {
		t.Fatalf("echo = %q, %v; want ping", v.Data, err)
	}
}

// rawConn performs the handshake by hand and returns the framed stream.
func rawConn(t *testing.T, addr string, hello helloRequest) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if hello.Manifest.Codec == "" {
		hello.Manifest = fakeManifest
	}
	hello.Fingerprint = hello.Manifest.Fingerprint()
	body, _ := json.Marshal(hello)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+connectPath, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocolName)
	if err := req.Write(nc); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %s", resp.Status)
	}
	return nc, br
}

// readGoodbye reads frames until a goodbye and returns its error.
func readGoodbye(t *testing.T, br *bufio.Reader) error {
	t.Helper()
	fr := frameReader{r: br, limit: DefaultMaxMessageSize}
	for {
		body, err := fr.next()
		if err != nil {
			t.Fatalf("read before goodbye: %v", err)
		}
		m, err := decodeMessage(body)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if m.typ == msgGoodbye {
			return m.err
		}
	}
}

func TestGarbledMessageDropsOnlyThatConnection(t *testing.T) {
	for name, frame := range map[string][]byte{
		"unknown type": {0, 0, 0, 3, 99, 1, 2},
		"truncated":    {0, 0, 0, 3, byte(msgRunTask), 1, 0xff},
		"result sent to a worker": func() []byte {
			b, _ := appendFrame(nil, &message{typ: msgResult, id: 1})
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			is := is.New(t)
			addr, _ := startServer(t, nil)
			good := dialTest(t, addr, nil)
			echoWorks(t, good)
			nc, br := rawConn(t, addr, helloRequest{})
			_, err := nc.Write(frame)
			is.NoErr(err)
			bye := readGoodbye(t, br)
			is.Equal(backend.CodeOf(bye), backend.InvalidArgument)
			_, err = br.ReadByte()
			is.Equal(err, io.EOF) // the worker closed this connection
			echoWorks(t, good)    // and still serves the other
			echoWorks(t, dialTest(t, addr, nil))
		})
	}
}

func TestOversizedMessage(t *testing.T) {
	t.Run("Received", func(t *testing.T) {
		is := is.New(t)
		addr, _ := startServer(t, &ServerOptions{MaxMessageSize: 1 << 20})
		good := dialTest(t, addr, nil)
		nc, br := rawConn(t, addr, helloRequest{})
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], 3<<20)
		_, err := nc.Write(hdr[:])
		is.NoErr(err)
		bye := readGoodbye(t, br)
		is.Equal(backend.CodeOf(bye), backend.ResourceExhausted)
		is.True(strings.Contains(bye.Error(), "message of 3.0 MiB exceeds the limit of 1.0 MiB"))
		echoWorks(t, good)
	})
	t.Run("Sent", func(t *testing.T) {
		is := is.New(t)
		addr, _ := startServer(t, &ServerOptions{MaxMessageSize: 1 << 20})
		c := dialTest(t, addr, nil)
		ctx := context.Background()
		_, err := c.RunTask(ctx, "echo", backend.Value{Data: make([]byte, 2<<20)}, nil)
		is.Equal(backend.CodeOf(err), backend.ResourceExhausted) // refused before sending,
		is.True(strings.Contains(err.Error(), "run task echo"))
		is.True(strings.Contains(err.Error(), "exceeds the limit of 1.0 MiB"))
		echoWorks(t, c) // on a connection that stays up
	})
	t.Run("Result", func(t *testing.T) {
		is := is.New(t)
		addr, _ := startServer(t, &ServerOptions{MaxMessageSize: 1 << 20})
		c := dialTest(t, addr, nil)
		_, err := c.RunTask(context.Background(), "big", backend.Value{Data: []byte("2000000")}, nil)
		is.Equal(backend.CodeOf(err), backend.ResourceExhausted)
		is.True(strings.Contains(err.Error(), "result of task big cannot be sent"))
		echoWorks(t, c)
	})
}

func TestHandshakeRefusals(t *testing.T) {
	addr, _ := startServer(t, nil)
	ctx := context.Background()
	t.Run("BadToken", func(t *testing.T) {
		is := is.New(t)
		_, err := Dial(ctx, addr, &ClientOptions{Token: "wrong", Manifest: fakeManifest})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
		is.True(strings.Contains(err.Error(), "token is missing or wrong"))
		_, err = Dial(ctx, addr, &ClientOptions{Manifest: fakeManifest})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	})
	t.Run("Manifest", func(t *testing.T) {
		is := is.New(t)
		m := Manifest{Codec: "raw", Entries: []Entry{fakeEntries[0], fakeEntries[1], {Kind: KindTask, Name: "echo", Signature: "func(int) int"}}}
		_, err := Dial(ctx, addr, &ClientOptions{Token: testToken, Manifest: m})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
		is.True(strings.Contains(err.Error(), `built from different code: task "echo" is func(int) int in the driver but func(string) string in the worker`))
	})
	t.Run("Codec", func(t *testing.T) {
		is := is.New(t)
		m := fakeManifest
		m.Codec = "gob"
		_, err := Dial(ctx, addr, &ClientOptions{Token: testToken, Manifest: m})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
		is.True(strings.Contains(err.Error(), `no codec "gob"`))
	})
	t.Run("ProtocolVersion", func(t *testing.T) {
		is := is.New(t)
		body, _ := json.Marshal(helloRequest{Manifest: fakeManifest})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+connectPath, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "goray-worker/99")
		resp, err := http.DefaultClient.Do(req)
		is.NoErr(err)
		defer resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusPreconditionFailed)
		err = refusal(resp, fakeManifest)
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
		is.True(strings.Contains(err.Error(), `the driver speaks "goray-worker/99", this worker speaks "goray-worker/1"`))
		http.DefaultClient.CloseIdleConnections()
	})
	t.Run("NotHTTP", func(t *testing.T) {
		is := is.New(t)
		nc, err := net.Dial("tcp", addr)
		is.NoErr(err)
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = nc.Write([]byte("\x00\x01garbage\r\n\r\n"))
		is.NoErr(err)
		resp, err := io.ReadAll(nc)
		is.NoErr(err)
		is.True(strings.HasPrefix(string(resp), "HTTP/1.1 400"))
	})
	echoWorks(t, dialTest(t, addr, nil)) // the worker still serves
}

func TestHeartbeatTimeout(t *testing.T) {
	t.Run("SilentDriver", func(t *testing.T) {
		is := is.New(t)
		addr, _ := startServer(t, nil)
		nc, br := rawConn(t, addr, helloRequest{Heartbeat: 10})
		// The worker heartbeats; the raw driver never answers, so the
		// worker drops it after five missed intervals.
		start := time.Now()
		_, err := io.Copy(io.Discard, br)
		is.NoErr(err) // EOF: the worker closed the connection
		is.True(time.Since(start) < 10*time.Second)
		nc.Close()
	})
	t.Run("SilentWorker", func(t *testing.T) {
		is := is.New(t)
		// A fake worker that completes the handshake, then says nothing.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		is.NoErr(err)
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(nc))
			if err == nil {
				io.Copy(io.Discard, req.Body)
				io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "+protocolName+"\r\nConnection: Upgrade\r\n\r\n")
			}
			accepted <- nc
		}()
		lost := make(chan error, 1)
		c, err := Dial(context.Background(), ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: fakeManifest,
			Heartbeat: 10 * time.Millisecond, OnLost: func(err error) { lost <- err }})
		is.NoErr(err)
		defer c.Close()
		nc := <-accepted
		defer nc.Close()
		_, err = c.RunTask(context.Background(), "echo", backend.Value{Data: []byte("x")}, nil)
		is.Equal(backend.CodeOf(err), backend.Unavailable)
		is.True(strings.Contains(err.Error(), "heard nothing from the peer"))
		lerr := <-lost // OnLost ran before the call failed
		is.True(strings.Contains(lerr.Error(), "heard nothing"))
	})
}

func TestIdleTimeout(t *testing.T) {
	is := is.New(t)
	srv, err := NewServer(fakeRegistry{}, &ServerOptions{Token: testToken, IdleTimeout: 500 * time.Millisecond}) // ample for a loopback dial
	is.NoErr(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	c, err := Dial(context.Background(), ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: fakeManifest})
	is.NoErr(err)
	echoWorks(t, c)
	select {
	case err := <-done:
		t.Fatalf("Serve returned %v with a driver connected", err)
	default:
	}
	c.Close()
	select {
	case err := <-done:
		is.Equal(err, ErrNoDriver) // once the driver left, the idle timeout ran
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the idle timeout")
	}
}

func TestCancelReachesWorker(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := c.RunTask(ctx, "block", backend.Value{Data: []byte("x")}, nil)
		res <- err
	}()
	cancel()
	is.Equal(<-res, context.Canceled)
	echoWorks(t, c)
}

func TestServerCloseFailsCalls(t *testing.T) {
	is := is.New(t)
	srv, err := NewServer(fakeRegistry{}, &ServerOptions{Token: testToken})
	is.NoErr(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	res := make(chan error, 1)
	callDoneAtLoss := make(chan bool, 1)
	c, err := Dial(context.Background(), ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: fakeManifest,
		OnLost: func(error) { callDoneAtLoss <- len(res) > 0 }})
	is.NoErr(err)
	defer c.Close()
	go func() {
		_, err := c.RunTask(context.Background(), "block", backend.Value{Data: []byte("x")}, nil)
		res <- err
	}()
	<-blockStarted // the task runs in the worker
	stop()
	err = <-res
	is.Equal(backend.CodeOf(err), backend.Unavailable)
	t.Log(err)
	is.True(strings.Contains(err.Error(), "worker shutting down"))
	is.Equal(<-callDoneAtLoss, false) // OnLost ran before the call failed
	is.Equal(<-done, context.Canceled)
	<-c.Done()
	is.True(c.Err() != nil)
}

// doneFunc adapts a function to backend.TaskDone.
type doneFunc func(backend.Value, error)

func (f doneFunc) TaskDone(v backend.Value, err error) { f(v, err) }

type startResult struct {
	v   backend.Value
	err error
}

// startTask calls StartTask and returns the channel of its result. done
// waits until StartTask has returned, so a done called on StartTask's own
// goroutine deadlocks the test.
func startTask(ctx context.Context, c *Client, name, arg string) <-chan startResult {
	res := make(chan startResult, 2) // room for a second, wrong, call
	returned := make(chan struct{})
	c.StartTask(ctx, name, backend.Value{Data: []byte(arg)}, nil, doneFunc(func(v backend.Value, err error) {
		<-returned
		res <- startResult{v, err}
	}))
	close(returned)
	return res
}

func TestStartTask(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	var results []<-chan startResult
	for i := range 500 {
		results = append(results, startTask(context.Background(), c, "echo", strconv.Itoa(i)))
	}
	for i, res := range results {
		r := <-res
		is.NoErr(r.err)
		is.Equal(string(r.v.Data), strconv.Itoa(i))
	}
	for _, res := range results {
		is.Equal(len(res), 0) // done was called once
	}
	r := <-startTask(context.Background(), c, "nope", "x")
	is.Equal(backend.CodeOf(r.err), backend.NotFound)
}

func TestStartTaskCancel(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	ctx, cancel := context.WithCancel(context.Background())
	res := startTask(ctx, c, "block", "x")
	<-blockStarted // the task runs in the worker
	cancel()
	is.Equal((<-res).err, context.Canceled)
	r := <-startTask(ctx, c, "echo", "x") // already cancelled
	is.Equal(r.err, context.Canceled)
	echoWorks(t, c)
	is.Equal(len(res), 0)
}

// TestBlockedTasksHoldOnlyTheirRunners: a burst of tasks that all block
// (more than the runners a connection keeps idle) all start, each on a
// runner of its own, while they block; other work still runs; all end
// when cancelled, and the connection's goroutines with them.
func TestBlockedTasksHoldOnlyTheirRunners(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 2*maxIdleRunners + 3
	results := make([]<-chan startResult, n)
	for i := range results {
		results[i] = startTask(ctx, c, "block", "x")
	}
	for i := range n {
		select {
		case <-blockStarted: // every one runs, though all that started before it block
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d blocking tasks started; the others wait for a runner", i, n)
		}
	}
	echoWorks(t, c)
	cancel()
	for _, res := range results {
		is.Equal((<-res).err, context.Canceled)
	}
	echoWorks(t, c)
}

// idCtx is a context with numbered watches (idWatcher), as backend/cluster's
// task contexts have.
type idCtx struct {
	context.Context
	mu    sync.Mutex
	n     uint64
	stops map[uint64]func() bool
}

func newIDCtx() (*idCtx, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	return &idCtx{Context: ctx, stops: map[uint64]func() bool{}}, cancel
}

func (c *idCtx) AfterFuncID(f func()) (uint64, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.stops[c.n] = context.AfterFunc(c.Context, f)
	return c.n, nil
}

func (c *idCtx) StopAfterFunc(id uint64) bool {
	c.mu.Lock()
	stop := c.stops[id]
	delete(c.stops, id)
	c.mu.Unlock()
	return stop != nil && stop()
}

// TestStartTaskWatchReuse: the watches of finished tasks' contexts are
// reused for later tasks; cancelling a later task's context cancels that
// task, and cancelling a finished task's context cancels nothing.
func TestStartTaskWatchReuse(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	var old []context.CancelFunc
	for i := range 20 {
		ctx, cancel := newIDCtx()
		old = append(old, cancel)
		r := <-startTask(ctx, c, "echo", strconv.Itoa(i))
		is.NoErr(r.err)
		is.Equal(string(r.v.Data), strconv.Itoa(i))
	}
	c.pmu.Lock()
	free := len(c.watches)
	c.pmu.Unlock()
	is.True(free > 0) // kept for reuse

	ctx, cancel := newIDCtx()
	res := startTask(ctx, c, "block", "x") // on a reused watch
	<-blockStarted
	for _, cancelOld := range old {
		cancelOld() // the finished tasks' contexts: nothing to cancel
	}
	echoWorks(t, c)
	is.Equal(len(res), 0) // still running
	cancel()
	is.Equal((<-res).err, context.Canceled)
	echoWorks(t, c)
}

func TestStartTaskLostAndClosed(t *testing.T) {
	is := is.New(t)
	srv, err := NewServer(fakeRegistry{}, &ServerOptions{Token: testToken})
	is.NoErr(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	c, err := Dial(context.Background(), ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: fakeManifest})
	is.NoErr(err)
	res := startTask(context.Background(), c, "block", "x")
	<-blockStarted
	stop()
	r := <-res
	is.Equal(backend.CodeOf(r.err), backend.Unavailable)
	is.True(strings.Contains(r.err.Error(), "worker shutting down"))
	is.Equal(<-done, context.Canceled)
	<-c.Done()
	r = <-startTask(context.Background(), c, "echo", "x") // on the lost connection
	is.Equal(backend.CodeOf(r.err), backend.Unavailable)
	is.NoErr(c.Close())
	r = <-startTask(context.Background(), c, "echo", "x")
	is.True(r.err != nil)
}
