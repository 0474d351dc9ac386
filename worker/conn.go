package worker

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

const (
	// DefaultHeartbeat is the heartbeat interval when the options leave it
	// 0. A side that hears nothing for heartbeatMisses intervals drops the
	// connection.
	DefaultHeartbeat = time.Second
	heartbeatMisses  = 5
	// highWater is how many encoded bytes may wait for the writer before
	// senders block (a slow or stuck peer pushes back on its callers).
	highWater = 8 << 20
	// goodbyeTimeout bounds the flush of a goodbye before the connection
	// is closed regardless.
	goodbyeTimeout = time.Second
	// keepBuffer is the largest write buffer kept for reuse.
	keepBuffer = 1 << 20
	// holdLimit is how many bytes sendHeld queues before it wakes the
	// writer anyway.
	holdLimit = 256 << 10
)

// conn is one framed connection, after the handshake. Any goroutine may
// send; one goroutine (the owner's) reads with readLoop. Frames are
// encoded straight into a shared buffer that one writer goroutine flushes
// in a single write, so messages sent while a write is in progress go out
// together: throughput comes from batching, not from parallel writes.
type conn struct {
	nc    net.Conn
	fr    frameReader
	infos infoCache // the reader's
	limit int
	hb    time.Duration
	log   *slog.Logger

	wmu     sync.Mutex
	enc     infoEnc // the last runtime info encoded; guarded by wmu
	wcond   sync.Cond
	wbuf    []byte
	spare   []byte // a written buffer kept for reuse
	writing bool   // a write is in progress (the writer's or a sender's)
	werr    error  // non-nil once closed: every send fails with it
	closing bool   // a goodbye is queued: close once it is flushed
	byeErr  error
	wake    chan struct{}
	// held is set when the queue holds frames sent on behalf of the
	// reader (sendHeld: the replies of a burst of tasks run on the
	// worker's reader, the tasks the driver's reader starts as results
	// come in) and the writer has not been woken for them: the reader
	// writes them before it reads from the socket again (release), so a
	// burst's frames go out in one write with no goroutine woken. sock
	// does the socket's reads and writes (nil: net.Conn's).
	held bool
	sock *sockIO
	// idle, if set, is called by the reader once it has handled the
	// frames it read, after release, before it reads again.
	idle func()

	sent, recvd atomic.Bool
	// backlog is set while the reader handles a frame with more frames
	// buffered behind it: a reply then is not lone (send), more
	// requests, and their replies, follow.
	backlog atomic.Bool

	closeOnce sync.Once
	cause     error // why the connection closed; set before done closes
	done      chan struct{}
	wg        sync.WaitGroup
}

// readBuffer is the size of a connection's read buffer: a burst of
// frames is read in few reads.
const readBuffer = 64 << 10

// newConn makes the connection of nc, whose first bytes may be buffered
// in br (the handshake's reader).
func newConn(nc net.Conn, br *bufio.Reader, limit int, hb time.Duration, log *slog.Logger) *conn {
	sock := newSockIO(nc)
	var r *bufio.Reader
	switch {
	case sock != nil:
		r = bufio.NewReaderSize(sockReader(br, sock), readBuffer)
	case br.Size() >= readBuffer:
		r = br
	default:
		// It reads past the small buffer once that is drained.
		r = bufio.NewReaderSize(br, readBuffer)
	}
	c := &conn{
		nc: nc, fr: frameReader{r: r, limit: limit}, limit: limit, hb: hb, log: log,
		wake: make(chan struct{}, 1), done: make(chan struct{}), sock: sock,
	}
	c.wcond.L = &c.wmu
	return c
}

// start runs the writer and heartbeat goroutines.
func (c *conn) start() {
	c.wg.Add(2)
	go c.writeLoop()
	go c.heartbeatLoop()
}

// errConnClosed is the error of sends on a closed connection; its cause is
// the reason the connection closed.
type errConnClosed struct{ cause error }

func (e *errConnClosed) Error() string { return "connection closed: " + e.cause.Error() }
func (e *errConnClosed) Unwrap() error { return e.cause }

// send queues m. Unless force is set it waits while the queue is over its
// high-water mark. It fails at once, without queueing, when m cannot be
// encoded or exceeds the message limit; the connection stays usable.
//
// lone says that the caller expects no other frame to follow soon (the
// only request in flight, the reply of the only running work): when no
// write is in progress and nothing is queued, the caller writes the frame
// itself instead of waking the writer goroutine, which would yield for
// more frames first. A synchronous round trip then costs no goroutine
// switch on the sending side. A failed write closes the connection, as
// it does in the writer.
func (c *conn) send(m *message, force, lone bool) error {
	how := sendQueued
	if lone {
		how = sendLone
	}
	return c.enqueue(m, force, how)
}

// sendHeld queues m for the reader to write once it has handled the
// frames it read (release), without waking the writer: the caller sends
// on the reader's behalf, and the reader (or, for a lone task's run whose
// reading was handed over, the caller) calls release before it waits on
// the socket. A queue past holdLimit wakes the writer anyway.
func (c *conn) sendHeld(m *message, force bool) error {
	return c.enqueue(m, force, sendHeld)
}

type sendHow uint8

const (
	sendQueued sendHow = iota // the writer goroutine writes it
	sendLone                  // written by the sender if nothing is queued
	sendHeld                  // the reader writes it (release)
)

func (c *conn) enqueue(m *message, force bool, how sendHow) error {
	c.wmu.Lock()
	for !force && len(c.wbuf) >= highWater && c.werr == nil && !c.closing {
		c.wcond.Wait()
	}
	if c.werr != nil {
		err := c.werr
		c.wmu.Unlock()
		return err
	}
	if c.closing {
		c.wmu.Unlock()
		return &errConnClosed{cause: c.byeErr}
	}
	start := len(c.wbuf)
	b, err := appendFrameCached(c.wbuf, m, &c.enc)
	if err != nil {
		c.wbuf = b
		c.wmu.Unlock()
		return backend.Wrap(backend.InvalidArgument, "", err)
	}
	if n := len(b) - start - frameHeader; n > c.limit {
		c.wbuf = b[:start]
		c.wmu.Unlock()
		return backend.Wrap(backend.ResourceExhausted, "", &tooLargeError{size: uint64(n), limit: uint64(c.limit)})
	}
	c.wbuf = b
	var wake bool
	switch how {
	case sendLone:
		if start == 0 && !c.writing {
			c.flushLocked()
			return nil
		}
		wake = start == 0 || c.held
	case sendQueued:
		wake = start == 0 || c.held
	case sendHeld:
		if start == 0 {
			c.held = true
		}
		wake = c.held && len(b) >= holdLimit
	}
	if wake {
		c.held = false
	}
	c.wmu.Unlock()
	if wake {
		c.signal()
	}
	return nil
}

// release writes the frames queued by sendHeld that no writer was woken
// for, unless a write is in progress (its writer goes on with them):
// what the socket takes at once is written on the calling goroutine, the
// rest (and everything, when the connection is not a plain socket) by
// the writer goroutine.
func (c *conn) release() {
	c.wmu.Lock()
	if !c.held {
		c.wmu.Unlock()
		return
	}
	c.held = false
	if len(c.wbuf) == 0 || c.writing || c.werr != nil {
		c.wmu.Unlock()
		return
	}
	if c.sock == nil {
		c.wmu.Unlock()
		c.signal()
		return
	}
	// The write does not block, so wmu stays held: no frame can be
	// queued between the part written and the rest.
	n, err := c.sock.TryWrite(c.wbuf)
	if n > 0 {
		c.sent.Store(true)
	}
	rest := copy(c.wbuf, c.wbuf[n:])
	c.wbuf = c.wbuf[:rest]
	c.wcond.Broadcast()
	c.wmu.Unlock()
	switch {
	case err != nil:
		c.close(fmt.Errorf("write: %w", err))
	case rest > 0:
		c.signal()
	}
}

// write writes out whole, waiting for the socket; one write at a time
// (the caller has set writing).
func (c *conn) write(out []byte) error {
	var err error
	if c.sock != nil {
		_, err = c.sock.Write(out)
	} else {
		_, err = c.nc.Write(out)
	}
	return err
}

// queued returns how many bytes wait for the writer.
func (c *conn) queued() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.wbuf)
}

// signal wakes the writer.
func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flushLocked writes the queued frames on the caller's goroutine. It is
// called with wmu held, no write in progress and frames queued, and
// returns with wmu released. Frames queued during the write are left to
// the writer goroutine, woken for them.
func (c *conn) flushLocked() {
	out := c.take()
	c.wmu.Unlock()
	err := c.write(out)
	c.sent.Store(true)
	c.wmu.Lock()
	c.written(out)
	more := len(c.wbuf) > 0 || c.closing
	c.wmu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("write: %w", err))
		return
	}
	if more {
		c.signal()
	}
}

// take takes the queued frames for a write, with wmu held.
func (c *conn) take() []byte {
	c.held = false // what was held is being written
	out := c.wbuf
	c.wbuf = c.spare[:0]
	c.spare = nil
	c.writing = true
	c.wcond.Broadcast()
	return out
}

// written ends a write of out, with wmu held, keeping out for reuse.
func (c *conn) written(out []byte) {
	c.writing = false
	if cap(out) <= keepBuffer {
		c.spare = out[:0]
	}
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			// Let the goroutines that are ready to send (the runs a
			// batch of requests started, a submitter) queue their frames
			// first, so that one write carries them all: writing as soon
			// as woken sent about 2 frames per write. While frames keep
			// coming, yield again (a few times at most): a burst goes
			// out in fewer, larger writes. (A lone frame is written by
			// its sender: send's lone.)
			c.settle()
			c.wmu.Lock()
			if c.writing {
				// A sender writes; it wakes the writer if frames are
				// left when it is done.
				c.wmu.Unlock()
				break
			}
			if len(c.wbuf) == 0 || c.werr != nil {
				closing, bye := c.closing, c.byeErr
				c.wmu.Unlock()
				if closing {
					c.close(bye)
					return
				}
				break
			}
			out := c.take()
			c.wmu.Unlock()
			err := c.write(out)
			c.sent.Store(true)
			c.wmu.Lock()
			c.written(out)
			c.wmu.Unlock()
			if err != nil {
				c.close(fmt.Errorf("write: %w", err))
				return
			}
		}
	}
}

// maxSettleYields bounds the yields of settle.
const maxSettleYields = 4

// settle yields to the goroutines ready to send until a yield adds no
// bytes to the write buffer, or maxSettleYields.
func (c *conn) settle() {
	c.wmu.Lock()
	n := len(c.wbuf)
	c.wmu.Unlock()
	for range maxSettleYields {
		runtime.Gosched()
		c.wmu.Lock()
		m := len(c.wbuf)
		c.wmu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

func (c *conn) heartbeatLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.hb)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		if c.recvd.Swap(false) {
			misses = 0
		} else if misses++; misses >= heartbeatMisses {
			c.close(fmt.Errorf("heard nothing from the peer for %v (%d heartbeats)", time.Duration(misses)*c.hb, misses))
			return
		}
		// Either way, frames a reader held are written now, should it
		// be held up before it wrote them: the heartbeat's send wakes
		// the writer for them, or release writes them.
		if !c.sent.Swap(false) {
			c.send(&message{typ: msgHeartbeat}, true, false) //nolint:errcheck // a closed connection has its cause already
		} else {
			c.release()
		}
	}
}

// goodbye queues a goodbye carrying err, after which the writer closes the
// connection with err as its cause. It is how a side tells its peer why it
// drops the connection (a garbled or oversized message).
func (c *conn) goodbye(err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil || c.closing {
		return
	}
	if b, e := appendFrame(c.wbuf, &message{typ: msgGoodbye, err: err}); e == nil {
		c.wbuf = b
	}
	c.closing, c.byeErr = true, err
	c.wcond.Broadcast()
	c.nc.SetWriteDeadline(time.Now().Add(goodbyeTimeout)) //nolint:errcheck // best effort
	c.signal()
}

// close closes the connection once, recording why.
func (c *conn) close(cause error) {
	c.closeOnce.Do(func() {
		if cause == nil {
			cause = errors.New("closed")
		}
		c.wmu.Lock()
		c.werr = &errConnClosed{cause: cause}
		c.wcond.Broadcast()
		c.wmu.Unlock()
		c.cause = cause
		c.nc.Close()
		close(c.done)
	})
}

// remoteError is the cause of a connection that the peer closed with a
// goodbye.
type remoteError struct{ err error }

func (e *remoteError) Error() string { return "the peer closed the connection: " + e.err.Error() }
func (e *remoteError) Unwrap() error { return e.err }

// readLoop reads frames until the connection fails, handing each request
// or reply to handle. A frame that is garbled or too large, or that handle
// rejects, ends the connection with a goodbye naming the problem. It
// returns the cause.
//
// handle must not keep m or its info, which are reused for the next
// frame: one message per connection instead of one per frame.
func (c *conn) readLoop(handle func(m *message) error) error {
	var m message
	for {
		if !c.fr.hasFrame() {
			// The next read may wait for the peer: write what the
			// frames handled since the last read held first.
			c.release()
			if c.idle != nil {
				c.idle()
			}
		}
		body, err := c.fr.next()
		if err != nil {
			var tl *tooLargeError
			switch {
			case errors.As(err, &tl):
				c.goodbye(backend.Wrap(backend.ResourceExhausted, "", err))
			case errors.Is(err, errGarbled):
				c.goodbye(backend.Wrap(backend.InvalidArgument, "", err))
			default:
				c.close(fmt.Errorf("read: %w", err))
			}
			return c.waitCause(err)
		}
		c.recvd.Store(true)
		c.backlog.Store(c.fr.buffered() > 0)
		if err := decodeInto(&m, body, &c.infos); err != nil {
			c.goodbye(backend.Wrap(backend.InvalidArgument, "", err))
			return c.waitCause(err)
		}
		switch m.typ {
		case msgHeartbeat:
			continue
		case msgGoodbye:
			c.close(&remoteError{err: m.err})
			return c.cause
		}
		if err := handle(&m); err != nil {
			if err == errHandedOver {
				return err // another goroutine reads on
			}
			c.goodbye(backend.Wrap(backend.InvalidArgument, "", err))
			return c.waitCause(err)
		}
	}
}

// waitCause returns the recorded cause if the connection is closed, else
// err (a goodbye still being flushed).
func (c *conn) waitCause(err error) error {
	select {
	case <-c.done:
		return c.cause
	default:
		return err
	}
}
