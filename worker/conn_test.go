package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// connPair returns a conn over one end of a synchronous pipe (a write
// blocks until the other end reads it), without its writer and heartbeat
// goroutines, and a frame reader of the other end.
func connPair(t *testing.T) (*conn, *frameReader) {
	t.Helper()
	a, b := net.Pipe()
	c := newConn(a, bufio.NewReader(a), DefaultMaxMessageSize, time.Hour, slog.New(slog.DiscardHandler))
	t.Cleanup(func() {
		c.close(backend.ErrClosed)
		c.wg.Wait()
		b.Close()
	})
	return c, &frameReader{r: bufio.NewReader(b), limit: DefaultMaxMessageSize}
}

func readMessage(t *testing.T, fr *frameReader) message {
	t.Helper()
	body, err := fr.next()
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	m, err := decodeMessage(body)
	if err != nil {
		t.Fatalf("decode frame: %v", err)
	}
	return m
}

// A lone frame (a synchronous round trip's) is written by its sender: no
// writer goroutine runs here, and the frame arrives.
func TestLoneFrameWrittenBySender(t *testing.T) {
	is := is.New(t)
	c, fr := connPair(t)
	sent := make(chan error, 1)
	go func() { sent <- c.send(&message{typ: msgCancel, id: 7}, false, true) }()
	m := readMessage(t, fr)
	is.Equal(m.typ, msgCancel)
	is.Equal(m.id, uint64(7))
	is.NoErr(<-sent)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	is.True(!c.writing)      // the write ended
	is.Equal(len(c.wbuf), 0) // nothing left queued
}

// Frames queued while a sender writes a lone frame are written after it,
// in order, by the writer goroutine, which the sender wakes for them;
// and a sender does not write while another write is in progress.
func TestFramesQueuedDuringALoneWrite(t *testing.T) {
	is := is.New(t)
	c, fr := connPair(t)
	c.wg.Add(1)
	go c.writeLoop()
	first := make(chan error, 1)
	go func() { first <- c.send(&message{typ: msgCancel, id: 1}, false, true) }()
	// The pipe holds the first write until it is read: wait until the
	// sender writes, then queue two more, one of them lone.
	for {
		c.wmu.Lock()
		w := c.writing
		c.wmu.Unlock()
		if w {
			break
		}
		time.Sleep(time.Millisecond)
	}
	is.NoErr(c.send(&message{typ: msgCancel, id: 2}, false, false))
	is.NoErr(c.send(&message{typ: msgCancel, id: 3}, false, true))
	for _, id := range []uint64{1, 2, 3} {
		is.Equal(readMessage(t, fr).id, id)
	}
	is.NoErr(<-first)
}

// A write that fails closes the connection, for a lone frame as for the
// writer's.
func TestLoneWriteFailureClosesTheConnection(t *testing.T) {
	is := is.New(t)
	a, b := net.Pipe()
	c := newConn(a, bufio.NewReader(a), DefaultMaxMessageSize, time.Hour, slog.New(slog.DiscardHandler))
	b.Close()
	is.NoErr(c.send(&message{typ: msgCancel, id: 1}, false, true)) // queued, then its write failed
	<-c.done
	is.True(c.cause != nil)
	err := c.send(&message{typ: msgCancel, id: 2}, false, true)
	var closed *errConnClosed
	is.True(errors.As(err, &closed))
}

func TestRunCtx(t *testing.T) {
	is := is.New(t)
	info := &backend.RuntimeInfo{Task: "t", Node: "n1", Attempt: 2}
	rc := newRunCtx(info, false)
	info.Node = "changed" // the context keeps its own copy of an info not shared
	got, ok := backend.RuntimeInfoFrom(rc)
	is.True(ok)
	is.Equal(got.Node, "n1")
	is.Equal(got, rc.runInfo())
	shared := newRunCtx(info, true) // a shared info is kept as it is
	got, ok = backend.RuntimeInfoFrom(shared)
	is.True(ok)
	is.True(got == info)
	is.Equal(rc.Err(), nil)
	_, has := rc.Deadline()
	is.True(!has)

	// Derived contexts are cancelled with it, through AfterFunc.
	child, stopChild := context.WithCancel(context.WithValue(rc, struct{}{}, 1))
	defer stopChild()
	stopped := context.AfterFunc(rc, func() { t.Error("a stopped AfterFunc ran") })
	is.True(stopped())
	done := rc.Done()
	select {
	case <-done:
		t.Fatal("done before cancel")
	default:
	}
	rc.cancel()
	rc.cancel() // idempotent
	<-done
	<-child.Done()
	is.Equal(rc.Err(), context.Canceled)
	is.Equal(child.Err(), context.Canceled)
	// After the cancellation: a new AfterFunc runs at once; Done is closed.
	ran := make(chan struct{})
	context.AfterFunc(rc, func() { close(ran) })
	<-ran
	<-rc.Done()

	// Without an info, no RuntimeInfo.
	_, ok = backend.RuntimeInfoFrom(newRunCtx(nil, true))
	is.True(!ok)
}

// Requests and replies of every size, lone (one caller at a time) and
// concurrent (frames batched behind writes in progress), all reach their
// callers intact: written by their senders or by the writer goroutine,
// no frame is lost, reordered into another's reply or interleaved.
func TestLoneAndBatchedFramesMix(t *testing.T) {
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	sizes := []int{1, 100, 70_000, 300_000} // the larger exceed a socket's buffer
	call := func(g, i int) error {
		arg := bytes.Repeat([]byte{byte('a' + (g+i)%26)}, sizes[(g+i)%len(sizes)])
		v, err := c.RunTask(context.Background(), "echo", backend.Value{Data: arg}, nil)
		if err != nil {
			return fmt.Errorf("call %d of %d: %w", i, g, err)
		}
		if !bytes.Equal(v.Data, arg) {
			return fmt.Errorf("call %d of %d: got %d bytes, want %d bytes of %q", i, g, len(v.Data), len(arg), arg[0])
		}
		return nil
	}
	// One caller: every request and reply is lone.
	for i := range 12 {
		if err := call(0, i); err != nil {
			t.Fatal(err)
		}
	}
	// Four callers at once, besides a burst of started tasks.
	errs := make(chan error, 4)
	for g := 1; g <= 4; g++ {
		go func() {
			for i := range 20 {
				if err := call(g, i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var burst []<-chan startResult
	for i := range 200 {
		burst = append(burst, startTask(context.Background(), c, "echo", strconv.Itoa(i)))
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i, res := range burst {
		r := <-res
		if r.err != nil || string(r.v.Data) != strconv.Itoa(i) {
			t.Fatalf("started task %d: got %q, %v", i, r.v.Data, r.err)
		}
	}
}

// Frames held for the reader (sendHeld) are written by release; what a
// full socket does not take at once is left to the writer goroutine,
// which writes it once the peer reads: every frame arrives, in order,
// and release never waits for the peer.
func TestReleaseLeavesWhatTheSocketRefusesToTheWriter(t *testing.T) {
	is := is.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := ln.Accept()
		accepted <- nc
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	is.NoErr(err)
	b := <-accepted
	is.True(b != nil)
	defer b.Close()
	// Small socket buffers: the frames below do not fit in them.
	is.NoErr(a.(*net.TCPConn).SetWriteBuffer(16 << 10))
	is.NoErr(b.(*net.TCPConn).SetReadBuffer(32 << 10))
	c := newConn(a, bufio.NewReader(a), DefaultMaxMessageSize, time.Hour, slog.New(slog.DiscardHandler))
	if c.sock == nil {
		t.Skip("no raw socket writes on this platform")
	}
	c.start()
	defer func() {
		c.close(backend.ErrClosed)
		c.wg.Wait()
	}()
	const n = 7
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 32<<10) }
	for i := range n { // 224 KiB, under holdLimit: nothing wakes the writer
		is.NoErr(c.sendHeld(&message{typ: msgResult, id: uint64(i), value: backend.Value{Data: payload(i)}}, false))
	}
	c.release() // returns though the peer reads nothing yet
	c.wmu.Lock()
	left := c.writing || len(c.wbuf) > 0
	c.wmu.Unlock()
	is.True(left) // the socket took only part of it
	fr := &frameReader{r: bufio.NewReader(b), limit: DefaultMaxMessageSize}
	for i := range n {
		m := readMessage(t, fr)
		is.Equal(m.id, uint64(i))
		is.True(bytes.Equal(m.value.Data, payload(i)))
	}
}
