package worker

import (
	"context"
	"net"
	"strconv"
	"sync"
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
		waitServer(srv, func(sc *serverConn) bool { return sc.running.len() == 0 })
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

// burstConn is a raw connection to a worker (no heartbeats during the
// test) that writes frames in one write and reads the worker's replies.
type burstConn struct {
	t  *testing.T
	nc net.Conn
	fr *frameReader
}

// tick is the period of the server's watch of tasks run on the reader.
func newBurstConn(t *testing.T, tick time.Duration) *burstConn {
	srv, err := NewServer(fakeRegistry{}, &ServerOptions{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv.tick = tick
	addr := serveOn(t, srv)
	nc, br := rawConn(t, addr, helloRequest{Heartbeat: time.Minute.Milliseconds()})
	return &burstConn{t: t, nc: nc, fr: &frameReader{r: br, limit: DefaultMaxMessageSize}}
}

// write sends ms in one write.
func (b *burstConn) write(ms ...*message) {
	b.t.Helper()
	var buf []byte
	for _, m := range ms {
		var err error
		if buf, err = appendFrame(buf, m); err != nil {
			b.t.Fatal(err)
		}
	}
	if _, err := b.nc.Write(buf); err != nil {
		b.t.Fatal(err)
	}
}

// reply reads the next reply (skipping heartbeats).
func (b *burstConn) reply() message {
	b.t.Helper()
	for {
		m := readMessage(b.t, b.fr)
		if m.typ != msgHeartbeat {
			return m
		}
	}
}

func runTaskMsg(id uint64, name, arg string) *message {
	return &message{typ: msgRunTask, id: id, name: name, value: backend.Value{Data: []byte(arg)}}
}

// TestBurstRunsOnReader: a burst of task requests read at once runs on
// the connection's reader, one task after another, with no runner woken;
// their replies come back in order. (The watch is slowed down: under
// load a takeover would hand the tasks after a slow one to runners.)
func TestBurstRunsOnReader(t *testing.T) {
	is := is.New(t)
	b := newBurstConn(t, time.Hour)
	const n = 20
	var ms []*message
	for i := range n {
		ms = append(ms, runTaskMsg(uint64(i+1), "onreader", ""))
	}
	b.write(ms...)
	for i := range n {
		m := b.reply()
		is.Equal(m.typ, msgResult)
		is.Equal(m.id, uint64(i+1))
		is.Equal(string(m.value.Data), "true") // on the reader
	}
}

// TestBlockingTaskInBurst: a task of a burst that blocks on the reader
// holds up the tasks read with it only until the watch takes the reading
// over: they then run on runners and reply while it still blocks.
func TestBlockingTaskInBurst(t *testing.T) {
	is := is.New(t)
	b := newBurstConn(t, loneTick)
	ms := []*message{runTaskMsg(1, "block", "")}
	for i := 2; i <= 11; i++ {
		ms = append(ms, runTaskMsg(uint64(i), "echo", strconv.Itoa(i)))
	}
	b.write(ms...)
	seen := map[uint64]bool{}
	for range 10 {
		m := b.reply()             // in any order: they run on runners
		is.Equal(m.typ, msgResult) // the blocking task is still running
		is.True(m.id >= 2 && m.id <= 11 && !seen[m.id])
		seen[m.id] = true
		is.Equal(string(m.value.Data), strconv.Itoa(int(m.id)))
	}
	b.write(&message{typ: msgCancel, id: 1})
	m := b.reply()
	is.Equal(m.typ, msgError)
	is.Equal(m.id, uint64(1))
	is.Equal(backend.CodeOf(m.err), backend.Canceled)
}

// TestCancelBehindBlockingTask: the cancellation of a task read behind a
// task that blocks on the reader, in the same burst, is read and reaches
// it while the first still blocks.
func TestCancelBehindBlockingTask(t *testing.T) {
	is := is.New(t)
	b := newBurstConn(t, loneTick)
	b.write(runTaskMsg(1, "block", ""), runTaskMsg(2, "block", ""), &message{typ: msgCancel, id: 2})
	m := b.reply()
	is.Equal(m.typ, msgError)
	is.Equal(m.id, uint64(2)) // cancelled while task 1 blocks
	is.Equal(backend.CodeOf(m.err), backend.Canceled)
	b.write(&message{typ: msgCancel, id: 1})
	m = b.reply()
	is.Equal(m.typ, msgError)
	is.Equal(m.id, uint64(1))
}

// flushRec is a backend.TaskDoneHolder's record: the results delivered
// held, and how many of them a Flush had seen last.
type flushRec struct {
	mu            sync.Mutex
	held, flushed int
	plain         int
	all           chan struct{} // closed by the Flush that saw want
	want          int
}

func (r *flushRec) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushed = r.held
	if r.held == r.want && r.all != nil {
		close(r.all)
		r.all = nil
	}
}

type holderDone struct{ r *flushRec }

func (d holderDone) TaskDone(backend.Value, error) {
	d.r.mu.Lock()
	d.r.plain++
	d.r.mu.Unlock()
}

func (d holderDone) TaskDoneHeld(backend.Value, error) backend.Flusher {
	d.r.mu.Lock()
	d.r.held++
	d.r.mu.Unlock()
	return d.r
}

// TestStartedResultsDeliveredHeld: the reader delivers the results of
// started tasks held when their done can hold, and flushes after them:
// every result is followed by a Flush.
func TestStartedResultsDeliveredHeld(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	const n = 300
	rec := &flushRec{want: n, all: make(chan struct{})}
	all := rec.all
	for i := range n {
		is.True(c.StartTask(context.Background(), "echo", backend.Value{Data: []byte(strconv.Itoa(i))}, nil, holderDone{rec}))
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		rec.mu.Lock()
		t.Fatalf("%d results delivered held, %d flushed", rec.held, rec.flushed)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	is.Equal(rec.plain, 0) // none delivered with TaskDone
	is.Equal(rec.held, n)  // each once
}
