package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A Process replica's request body is streamed to its server as it
// arrives (a bodyStream), instead of being read whole first as an actor
// replica's is: the ingress keeps at most RetryBufferBytes of it, the
// prefix a retry on another replica sends again before the rest of the
// client's body. Once more than that was read, the prefix is dropped and
// the request can no longer be retried.
//
// Every upstream attempt reads through its own bodyAttempt: it replays the
// kept prefix, then reads on from the client. Only the newest attempt may
// read: a new one revokes the one before it (whose transport may still
// hold it) and waits for a read of the client's body under way to end, so
// the bytes it brings are kept and replayed rather than lost. Reads of the
// client's body happen in the transport's goroutine; finish, at the end of
// the handler, interrupts one under way (a read deadline of now) and waits
// for it, so nothing reads the request once the handler has returned.

// bodyStream is one request body on its way to a Process replica.
type bodyStream struct {
	s       *Server
	src     io.Reader                // the client's body
	rc      *http.ResponseController // read deadlines of the client's connection
	limit   int64                    // MaxBodyBytes
	keepMax int64                    // the retry buffer's size
	timeout time.Duration            // BodyTimeout: the time spent waiting for the client

	mu          sync.Mutex
	idle        *sync.Cond    // signalled when a read of src ends
	buf         []byte        // the kept prefix: src's first len(buf) bytes
	n           int64         // bytes read from src
	held        int64         // bytes of the server's body budget held
	sized       bool          // the body's length is known: held is what buf needs
	keep        bool          // buf grows with what arrives (until the response begins)
	done        bool          // src ended: err, or EOF when err is nil
	err         error         // src's failure (413, 408, a broken connection)
	timedOut    bool          // err is the BodyTimeout's
	waited      time.Duration // in reads of src that ended
	readStart   time.Time     // of the read under way
	reading     bool          // a read of src is under way
	cur         *bodyAttempt  // the attempt that may read src
	finished    bool          // the handler is done: no more reads
	interrupted bool          // reads were cut off on purpose (finish, the request's end)
	connLost    bool          // by connLost: the replica's connection broke
}

// bodyAttempt is the body of one request to a replica's server.
type bodyAttempt struct {
	s      *bodyStream
	off    int64 // bytes of the body this attempt has returned
	closed bool  // closed by its transport, or revoked by a newer attempt
}

var errBodyAttemptClosed = errors.New("serve: request body of an abandoned attempt")

// newBodyStream returns the stream of r's body, holding held bytes of the
// server's budget (given back as the retry buffer is dropped).
func (s *Server) newBodyStream(w http.ResponseWriter, r *http.Request, held int64) *bodyStream {
	b := &bodyStream{
		s: s, src: r.Body, rc: http.NewResponseController(w),
		limit: s.opts.MaxBodyBytes, keepMax: s.retryBuffer(), timeout: s.opts.BodyTimeout,
		held: held, keep: true, sized: r.ContentLength >= 0,
	}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// retryBuffer is the effective retry buffer: at most a whole body.
func (s *Server) retryBuffer() int64 {
	return min(max(s.opts.RetryBufferBytes, 0), s.opts.MaxBodyBytes)
}

// attempt returns the body of a new request to a replica: the kept prefix,
// then the rest of the client's body. It revokes the previous attempt and
// waits for its read under way, if any. It fails with a noReplayError when
// more of the body was read than the retry buffer kept, and with the
// client's error when its body already failed.
func (b *bodyStream) attempt() (*bodyAttempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil {
		b.cur.closed = true
	}
	for b.reading {
		b.idle.Wait()
	}
	if e, ok := b.clientErrLocked(); ok {
		return nil, e
	}
	if b.finished || b.n > int64(len(b.buf)) {
		return nil, noReplayError{b.noReplayLocked()}
	}
	b.cur = &bodyAttempt{s: b}
	return b.cur, nil
}

// withTimeout returns the context of a request whose body streams:
// timeout (RequestTimeout) counts from now, but not the time spent waiting
// for the client's body, which BodyTimeout bounds instead, so a long
// upload does not use up the request's time. b may be nil (no body). When
// the time is up, the context is cancelled with the cause
// context.DeadlineExceeded.
func (b *bodyStream) withTimeout(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if b == nil {
		return context.WithTimeout(parent, timeout)
	}
	ctx, cancel := context.WithCancelCause(parent)
	due := time.Now().Add(timeout)
	var mu sync.Mutex
	var t *time.Timer
	stopped := false
	mu.Lock()
	t = time.AfterFunc(timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if left := time.Until(due.Add(b.clientWait())); left > 0 {
			t.Reset(left) // the client's time moved the deadline on
			return
		}
		cancel(context.DeadlineExceeded)
	})
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(context.Canceled)
	}
}

// clientWait is the time spent waiting for the client's body so far.
func (b *bodyStream) clientWait() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.waited
	if b.reading {
		w += time.Since(b.readStart)
	}
	return w
}

// getBody is the request's GetBody, for the transport's own retries on a
// reused connection that failed before anything was written.
func (b *bodyStream) getBody() (io.ReadCloser, error) { return b.attempt() }

func (a *bodyAttempt) Read(p []byte) (int, error) {
	b := a.s
	b.mu.Lock()
	if a.closed || b.finished || b.interrupted {
		b.mu.Unlock()
		return 0, errBodyAttemptClosed
	}
	if a.off < b.n {
		// Replay the kept prefix (attempt made sure buf holds it).
		k := copy(p, b.buf[a.off:b.n])
		a.off += int64(k)
		if !b.keep && a.off == b.n {
			b.dropLocked()
		}
		b.mu.Unlock()
		return k, nil
	}
	if b.done {
		err := b.err
		b.mu.Unlock()
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if len(p) == 0 {
		b.mu.Unlock()
		return 0, nil
	}
	// Read on from the client: at most one byte past MaxBodyBytes, for as
	// long as is left of BodyTimeout.
	p = p[:min(int64(len(p)), b.limit+1-b.n)]
	left := b.timeout - b.waited
	if left <= 0 {
		b.failLocked(os.ErrDeadlineExceeded, true)
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	t0 := time.Now()
	deadline := t0.Add(left)
	_ = b.rc.SetReadDeadline(deadline) // not every ResponseWriter supports it
	b.reading, b.readStart = true, t0
	b.mu.Unlock()

	k, err := b.src.Read(p)

	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = false
	b.idle.Broadcast()
	b.waited += now.Sub(t0)
	if b.n+int64(k) > b.limit {
		k, err = int(b.limit-b.n), &http.MaxBytesError{Limit: b.limit}
	}
	if k > 0 {
		if b.keep && b.n == int64(len(b.buf)) {
			if b.n+int64(k) <= b.keepMax {
				b.appendLocked(p[:k])
			} else {
				b.dropLocked() // too long to retry: stream the rest without keeping it
			}
		}
		b.n += int64(k)
		a.off = b.n
	}
	switch {
	case err == io.EOF:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
		if b.keep && b.held > int64(len(b.buf)) {
			b.releaseLocked(b.held - int64(len(b.buf))) // held only what arrived
		}
	case err != nil:
		// A timeout is the client's when the deadline passed, not when an
		// interrupt cut the read off earlier (a timeout's error cancels
		// the request's context, which interrupts too).
		ne, isNet := errors.AsType[net.Error](err)
		b.failLocked(err, isNet && ne.Timeout() && !now.Before(deadline))
		err = b.err
	}
	if a.closed || b.finished {
		// A revoked attempt's transport gets what it read (its connection
		// is gone anyway); the bytes are kept for the next attempt.
		if err == nil {
			err = errBodyAttemptClosed
		}
	}
	return k, err
}

func (a *bodyAttempt) Close() error {
	a.s.mu.Lock()
	a.closed = true
	a.s.mu.Unlock()
	return nil
}

// failLocked ends src with err: the client's failure (timeout: its
// BodyTimeout passed), unless the ingress interrupted the read itself.
func (b *bodyStream) failLocked(err error, timeout bool) {
	b.done = true
	if b.interrupted && !timeout {
		err = errBodyAttemptClosed
	}
	b.err, b.timedOut = err, timeout
}

// clientBodyError is a request that failed because of its body (too large,
// too slow, cut off by the client): answered with Code, never retried.
type clientBodyError struct {
	Code int
	Msg  string
}

func (e clientBodyError) Error() string { return e.Msg }

// clientErr returns the client's body failure. When the request's
// context ended it first waits for a read under way (interrupted, or the
// failure that ended the context: a read error of the client's connection
// cancels it), so that its failure is known.
func (b *bodyStream) clientErr(ctx context.Context) (clientBodyError, bool) {
	if b == nil {
		return clientBodyError{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for ctx.Err() != nil && b.reading {
		b.idle.Wait()
	}
	return b.clientErrLocked()
}

func (b *bodyStream) clientErrLocked() (clientBodyError, bool) {
	if b.err == nil || b.err == errBodyAttemptClosed {
		return clientBodyError{}, false
	}
	if _, big := errors.AsType[*http.MaxBytesError](b.err); big {
		return clientBodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than the limit of %d bytes (Options.MaxBodyBytes)", b.limit)}, true
	}
	if b.timedOut {
		return clientBodyError{http.StatusRequestTimeout, fmt.Sprintf("the request body took longer than %v to arrive (Options.BodyTimeout)", b.timeout)}, true
	}
	return clientBodyError{http.StatusBadRequest, fmt.Sprintf("read request body (at most %d bytes): %v", b.limit, b.err)}, true
}

// noReplayError is a request that cannot be sent again (to another
// replica, or where its server redirected it): more of its body was sent
// than the retry buffer keeps.
type noReplayError struct{ msg string }

func (e noReplayError) Error() string { return e.msg }

// replayable reports whether a new attempt could send the body again; if
// not, it says why.
func (b *bodyStream) replayable() (bool, string) {
	if b == nil {
		return true, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n <= int64(len(b.buf)) && !b.finished {
		return true, ""
	}
	return false, b.noReplayLocked()
}

func (b *bodyStream) noReplayLocked() string {
	return fmt.Sprintf("the request body was too large to retry: more than the %d bytes the retry buffer keeps (Options.RetryBufferBytes) had been sent; send the request again", b.keepMax)
}

// complete reports whether the client's body was read to its end.
func (b *bodyStream) complete() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done && b.err == nil
}

// responseBegan stops keeping the body (no retry can need it now) and
// gives back its budget, once the current attempt has replayed it.
func (b *bodyStream) responseBegan() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keep = false
	if b.cur == nil || b.cur.off >= int64(len(b.buf)) {
		b.dropLocked()
	}
}

// interrupt cuts off a read of the client's body under way: the request
// ended (answered, timed out, or its client went away).
func (b *bodyStream) interrupt() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.interruptLocked()
}

func (b *bodyStream) interruptLocked() {
	b.interrupted = true
	if b.reading {
		_ = b.rc.SetReadDeadline(time.Now())
	}
}

// finish ends the stream when the handler is done: no attempt reads on, a
// read under way is cut off and waited for, and the buffer and its budget
// are given back.
func (b *bodyStream) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = true
	if b.reading {
		b.interruptLocked()
	}
	for b.reading {
		b.idle.Wait()
	}
	b.dropLocked()
}

// appendLocked keeps p, growing buf at most to the retry buffer's size.
func (b *bodyStream) appendLocked(p []byte) {
	if need := len(b.buf) + len(p); need > cap(b.buf) {
		// b.held is the retry buffer, or less when the Content-Length is
		// less: need never passes it. A body of known length gets it at
		// once; a chunked one grows to it.
		c := int(b.held)
		if !b.sized {
			c = int(min(max(int64(2*cap(b.buf)), int64(need), 4<<10), b.held))
		}
		nb := make([]byte, len(b.buf), c)
		copy(nb, b.buf)
		b.s.retryBuffered.add(int64(c - cap(b.buf)))
		b.buf = nb
	}
	b.buf = append(b.buf, p...)
}

// dropLocked lets go of the kept prefix and its budget.
func (b *bodyStream) dropLocked() {
	b.keep = false
	b.s.retryBuffered.add(-int64(cap(b.buf)))
	b.buf = nil
	b.releaseLocked(b.held)
}

func (b *bodyStream) releaseLocked(n int64) {
	if n > 0 {
		b.held -= n
		b.s.releaseBody(n)
	}
}

// gauge is a value and its high-water mark.
type gauge struct{ cur, peak atomic.Int64 }

func (g *gauge) add(n int64) {
	v := g.cur.Add(n)
	for p := g.peak.Load(); v > p && !g.peak.CompareAndSwap(p, v); p = g.peak.Load() {
	}
}

// acquireBody takes n bytes of the budget for request bodies in memory.
func (s *Server) acquireBody(n int64) bool {
	if !s.bodies.TryAcquire(n) {
		return false
	}
	s.bodiesHeld.add(n)
	return true
}

// releaseBody gives back n bytes of the budget.
func (s *Server) releaseBody(n int64) {
	s.bodiesHeld.add(-n)
	s.bodies.Release(n)
}

// A body read blocked on a slow client holds up the transport when the
// replica's connection breaks: http.Transport returns the error only once
// its goroutine writing the body has returned from the body's Read. So
// the proxy's connections say when they close (the transport closes them
// when its read of the response fails), and a request that cannot be
// retried anyway has its read of the client's body cut off then
// (bodyAttempt.connLost), so that it is answered 502 at once rather than
// after the client's next bytes or BodyTimeout.

// watchDial wraps dial so that its connections are watchedConns.
func watchDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c}, nil
	}
}

// watchedConn calls the function watch gave it when it is closed.
type watchedConn struct {
	net.Conn
	mu      sync.Mutex
	closed  bool
	onClose *func()
}

func (c *watchedConn) Close() error {
	c.mu.Lock()
	f := c.onClose
	c.onClose, c.closed = nil, true
	c.mu.Unlock()
	if f != nil {
		(*f)()
	}
	return c.Conn.Close()
}

// watch has f called when c closes (at once if it is closed already),
// until the returned stop is called.
func (c *watchedConn) watch(f func()) (stop func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f()
		return func() {}
	}
	p := &f
	c.onClose = p
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.onClose == p {
			c.onClose = nil
		}
		c.mu.Unlock()
	}
}

// connLost is called when the connection carrying a's request closed. If
// a is reading the client's body and the request cannot be sent again
// (more was read than the retry buffer kept), the read is cut off: the
// request fails now with the connection's error, and its client's
// connection closes after the answer.
func (a *bodyAttempt) connLost() {
	b := a.s
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != a || a.closed || !b.reading || b.n <= int64(len(b.buf)) {
		return
	}
	a.closed = true
	b.connLost = true
	b.interruptLocked()
}

// cutByConnLoss reports whether connLost cut off the read of the client's
// body (which cancelled the request's context too).
func (b *bodyStream) cutByConnLoss() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.connLost
}
