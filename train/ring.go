package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// ring is a worker's place in the run's ring of peer connections: it sends
// to rank+1 on next and receives from rank-1 on prev. Collectives on it are
// serialized; any failure poisons it for good (the byte streams cannot be
// resynchronized), and every later collective returns the same error.
type ring struct {
	rank, size int
	sess       *session
	ln         net.Listener
	next, prev net.Conn
	// verdict bounds the wait for the driver to name the failed rank after
	// a peer connection broke; past it the peer is named.
	verdict time.Duration

	mu      sync.Mutex // one collective at a time
	seq     uint32
	scratch []uint64 // reduce buffer, 8-byte aligned for any element type

	failMu  sync.Mutex
	failErr error
	failed  chan struct{}
}

func newRing(rank, size int, sess *session, ln net.Listener, verdict time.Duration) *ring {
	return &ring{rank: rank, size: size, sess: sess, ln: ln, verdict: verdict, failed: make(chan struct{})}
}

func (r *ring) nextRank() int { return (r.rank + 1) % r.size }
func (r *ring) prevRank() int { return (r.rank + r.size - 1) % r.size }

// connect dials the next rank and accepts the previous one, checking the
// run token in the first frame of each connection.
func (r *ring) connect(ctx context.Context, addrs []string, token string) error {
	if r.size == 1 {
		return nil
	}
	stop := context.AfterFunc(ctx, func() { r.ln.Close() })
	defer stop()
	var d net.Dialer
	next, err := d.DialContext(ctx, "tcp", addrs[r.nextRank()])
	if err != nil {
		return fmt.Errorf("dial rank %d at %s: %w", r.nextRank(), addrs[r.nextRank()], err)
	}
	if err := r.adopt(&r.next, next); err != nil {
		return err
	}
	if err := writeFrame(next, opHello, uint32(r.rank), []byte(token)); err != nil {
		return fmt.Errorf("hello to rank %d: %w", r.nextRank(), err)
	}
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("accept rank %d: %w", r.prevRank(), err)
		}
		// A stray connection that sends nothing must not hold the ring.
		c.SetReadDeadline(time.Now().Add(rendezvousDialTimeout)) //nolint:errcheck // a failed read says it
		n, err := readHeader(c, opHello, uint32(r.prevRank()))
		buf := make([]byte, min(n, 256))
		if err == nil && n == len(token) {
			_, err = io.ReadFull(c, buf)
		}
		c.SetReadDeadline(time.Time{}) //nolint:errcheck // as above
		if err != nil || string(buf) != token {
			c.Close() // not our peer: a stray or stale connection
			continue
		}
		return r.adopt(&r.prev, c)
	}
}

// adopt stores a connected peer connection, unless the ring has failed
// meanwhile.
func (r *ring) adopt(slot *net.Conn, c net.Conn) error {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failErr != nil {
		c.Close()
		return r.failErr
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// Large socket buffers let a ring step move a whole chunk with
		// few wake-ups; the kernel caps them at its own limits.
		tc.SetReadBuffer(socketBuffer)  //nolint:errcheck // a hint
		tc.SetWriteBuffer(socketBuffer) //nolint:errcheck // a hint
	}
	*slot = c
	return nil
}

// socketBuffer is the send and receive buffer asked for on ring
// connections.
const socketBuffer = 4 << 20

// fail poisons the ring with err (the first error wins) and closes its
// connections, so that every blocked read and write returns.
func (r *ring) fail(err error) {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	if r.failErr != nil {
		return
	}
	r.failErr = err
	close(r.failed)
	r.closeConns()
}

func (r *ring) closeConns() {
	for _, c := range []io.Closer{r.next, r.prev, r.ln} {
		if c != nil {
			c.Close()
		}
	}
}

func (r *ring) failure() error {
	r.failMu.Lock()
	defer r.failMu.Unlock()
	return r.failErr
}

// close ends the ring after the loop returned.
func (r *ring) close() {
	r.fail(backend.Errorf(backend.FailedPrecondition, "", "train: the worker's loop has returned"))
}

// peerIOError is an I/O error on the connection to a ring neighbour.
type peerIOError struct {
	peer int
	err  error
}

func (e *peerIOError) Error() string { return fmt.Sprintf("connection to rank %d: %v", e.peer, e.err) }
func (e *peerIOError) Unwrap() error { return e.err }

// run runs one collective. On a broken peer connection it asks the driver
// which rank failed and returns that rank's [WorkerFailedError]; on ctx's
// end it poisons the ring (the peers learn of it through the driver) and
// returns ctx.Err().
func (r *ring) run(ctx context.Context, op opKind, f func(seq uint32) error) error {
	return collectiveErr(r.run1(ctx, op, f))
}

func (r *ring) run1(ctx context.Context, op opKind, f func(seq uint32) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failure(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.size == 1 {
		return f(0)
	}
	r.seq++
	stop := context.AfterFunc(ctx, func() {
		r.fail(fmt.Errorf("train: rank %d: %s: %w", r.rank, op, context.Cause(ctx)))
	})
	err := f(r.seq)
	stop()
	if err == nil {
		return nil
	}
	if aerr := r.sess.abortedErr(); aerr != nil {
		return aerr // the driver's word on who failed comes first
	}
	if ctx.Err() != nil {
		return r.ctxErr(ctx)
	}
	if ferr := r.failure(); ferr != nil {
		return ferr
	}
	var pe *peerIOError
	if !errors.As(err, &pe) {
		r.fail(fmt.Errorf("train: rank %d: %s: %w", r.rank, op, err))
		return r.failure()
	}
	// The connection broke without a known cause: the driver knows which
	// worker left first.
	r.sess.notify(&ctrlMsg{Type: msgPeerLost, Peer: pe.peer, Err: pe.err.Error()})
	t := time.NewTimer(r.verdict)
	defer t.Stop()
	select {
	case <-r.failed:
	case <-t.C:
		r.fail(&WorkerFailedError{Rank: pe.peer, Cause: fmt.Sprintf("connection from rank %d lost (%v) and the driver named no failed rank within %v", r.rank, pe.err, r.verdict)})
	case <-ctx.Done():
		return r.ctxErr(ctx)
	}
	return r.failure()
}

// ctxErr is the error of a collective whose ctx ended: the ring's failure
// if it has one. A driver's abort fails the ring and then cancels the
// loop's context, so both are often seen at once; the failure, which
// names the failed rank, wins (a select between the two picked either).
func (r *ring) ctxErr(ctx context.Context) error {
	if ferr := r.failure(); ferr != nil {
		return ferr
	}
	return ctx.Err()
}

// exchange sends send to the next rank while it receives a frame from the
// previous one into the buffer alloc returns for the frame's length.
func (r *ring) exchange(op opKind, seq uint32, send []byte, alloc func(n int) ([]byte, error)) error {
	sent := make(chan error, 1)
	go func() { sent <- writeFrame(r.next, op, seq, send) }()
	rerr := r.recv(op, seq, alloc)
	if rerr != nil {
		r.next.SetWriteDeadline(time.Unix(1, 0)) // unblock the sender; the ring is poisoned anyway
	}
	serr := <-sent
	if rerr != nil {
		return rerr
	}
	if serr != nil {
		return &peerIOError{peer: r.nextRank(), err: serr}
	}
	return nil
}

func (r *ring) recv(op opKind, seq uint32, alloc func(n int) ([]byte, error)) error {
	n, err := readHeader(r.prev, op, seq)
	if err != nil {
		if _, ok := err.(*mismatchError); ok {
			return err
		}
		return &peerIOError{peer: r.prevRank(), err: err}
	}
	buf, err := alloc(n)
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(r.prev, buf); err != nil {
		return &peerIOError{peer: r.prevRank(), err: err}
	}
	return nil
}

// send writes one frame to the next rank.
func (r *ring) send(op opKind, seq uint32, b []byte) error {
	if err := writeFrame(r.next, op, seq, b); err != nil {
		return &peerIOError{peer: r.nextRank(), err: err}
	}
	return nil
}

// exactly returns an alloc function that accepts only a frame of len(b)
// bytes and receives it into b.
func exactly(b []byte) func(int) ([]byte, error) {
	return func(n int) ([]byte, error) {
		if n != len(b) {
			return nil, backend.Errorf(backend.FailedPrecondition, "", "the ring neighbour sent %d bytes where this rank expected %d: every rank must pass slices of the same length", n, len(b))
		}
		return b, nil
	}
}
