package train

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// session is a worker's control connection to the run's rendezvous in the
// driver. One goroutine reads it: aborts poison the ring at once; replies
// go to the one request in flight.
type session struct {
	cc      *ctrlConn
	replies chan *ctrlMsg
	reqMu   sync.Mutex // one request in flight
	lastID  uint64

	closing atomic.Bool
	done    chan struct{} // the reader has returned

	abortMu  sync.Mutex
	abortErr error
	aborted  chan struct{}
	onAbort  func(error)
}

// rendezvousDialTimeout bounds a worker's connect to the driver.
const rendezvousDialTimeout = 10 * time.Second

// dialSession connects to the rendezvous at addr and joins as rank with
// peer address peerAddr (filled in by local when empty: the address of this
// end of the connection, which the driver's network can reach).
func dialSession(ctx context.Context, addr string) (*session, error) {
	// A driver address that workers cannot reach must fail in seconds,
	// not after the operating system's connect timeout (minutes).
	d := net.Dialer{Timeout: rendezvousDialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, withCode(backend.Unavailable, fmt.Errorf("train: this worker cannot reach the run's rendezvous at %s, where the driver listens (RunConfig.Rendezvous, or when empty the address the backend gives for the driver: kubernetes.Config.DriverHost or the driver pod's IP): %w", addr, err))
	}
	return &session{cc: newCtrlConn(c), replies: make(chan *ctrlMsg, 1), done: make(chan struct{}), aborted: make(chan struct{})}, nil
}

// localIP is the IP of this end of the connection to the driver.
func (s *session) localIP() string {
	if a, ok := s.cc.c.LocalAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return "127.0.0.1"
}

// start starts the reader; onAbort is called once when the driver aborts
// the run or the connection breaks.
func (s *session) start(onAbort func(error)) {
	s.onAbort = onAbort
	go func() {
		defer close(s.done)
		for {
			m, err := s.cc.recv()
			if err != nil {
				if !s.closing.Load() {
					s.abort(withCode(backend.Unavailable, fmt.Errorf("train: connection to the driver's rendezvous lost: %w", err)))
				}
				return
			}
			switch m.Type {
			case msgAbort:
				s.abort(&WorkerFailedError{Rank: m.Rank, Cause: m.Err})
			default:
				select {
				case s.replies <- m:
				default: // nobody asked: drop
				}
			}
		}
	}()
}

func (s *session) abort(err error) {
	s.abortMu.Lock()
	if s.abortErr != nil {
		s.abortMu.Unlock()
		return
	}
	s.abortErr = err
	close(s.aborted)
	s.abortMu.Unlock()
	if s.onAbort != nil {
		s.onAbort(err)
	}
}

func (s *session) abortedErr() error {
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	return s.abortErr
}

// request sends m and waits for the driver's reply (a late reply to an
// earlier, abandoned request is dropped).
func (s *session) request(ctx context.Context, m *ctrlMsg) (*ctrlMsg, error) {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	if err := s.abortedErr(); err != nil {
		return nil, err
	}
	s.lastID++
	m.ID = s.lastID
	if err := s.cc.send(m); err != nil {
		return nil, withCode(backend.Unavailable, fmt.Errorf("train: send %s to the driver: %w", m.Type, err))
	}
	for {
		select {
		case r := <-s.replies:
			if r.ID != m.ID {
				continue
			}
			if r.Type == msgError {
				code := backend.Code(r.Code)
				if code == backend.OK || code == backend.Unknown {
					code = backend.Internal
				}
				return nil, &backend.Error{Code: code, Err: errors.New(r.Err)}
			}
			return r, nil
		case <-s.aborted:
			return nil, s.abortedErr()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// notify sends m without waiting; a failure shows up on the reader.
func (s *session) notify(m *ctrlMsg) { s.cc.send(m) } //nolint:errcheck // a broken connection aborts through the reader

// leave tells the driver how the worker ended, closes the connection and
// waits for the reader.
func (s *session) leave(err error, canceled bool) {
	m := &ctrlMsg{Type: msgLeave, Canceled: canceled}
	if err != nil {
		m.Err = workerCause(err)
	}
	s.notify(m)
	s.closing.Store(true)
	s.cc.close()
	<-s.done
}
