//go:build unix

package worker

import (
	"bufio"
	"io"
	"net"
	"syscall"

	"github.com/goray-dev/goray/internal/rawio"
)

// sockIO reads and writes a plain socket (not TLS) through its raw
// connection: reads and writes wait for the socket in the runtime's
// poller as net.Conn's do, and tryWrite writes only what the socket
// takes at once. On Linux the system calls are made without the
// runtime's syscall bookkeeping (rawio.SysRead, rawio.SysWrite): a
// socket's reads and writes do not block, and entering a syscall wakes the runtime's
// monitor thread whenever the process was idle just before, which is
// every burst of frames of a connection that alternates with its peer.
type sockIO struct {
	rc syscall.RawConn
	// One read and one write at a time each: the reader reads, and
	// writes are made under the connection's wmu.
	rfn, wfn, tfn func(fd uintptr) bool
	rbuf          []byte
	rn            int
	rerr          error
	wbuf          []byte
	wn            int
	werr          error
}

// newSockIO returns a sockIO for nc, or nil when nc is not a plain socket
// (TLS): net.Conn's Read and Write serve it, and the writer goroutine
// writes what a reader queued.
func newSockIO(nc net.Conn) *sockIO {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &sockIO{rc: rc}
	s.rfn, s.wfn = s.read, s.writeAll
	s.tfn = func(fd uintptr) bool {
		s.writeNow(fd)
		return true // never wait
	}
	return s
}

// Read reads from the socket, waiting for data as net.Conn's Read does.
func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rbuf, s.rn, s.rerr = p, 0, nil
	err := s.rc.Read(s.rfn)
	n := s.rn
	if err == nil {
		err = s.rerr
	}
	s.rbuf, s.rerr = nil, nil
	return n, err
}

func (s *sockIO) read(fd uintptr) bool {
	for {
		n, err := rawio.SysRead(fd, s.rbuf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // wait for data
		case err != nil:
			s.rerr = err
		case n == 0:
			s.rerr = io.EOF
		default:
			s.rn = n
		}
		return true
	}
}

// Write writes b whole, waiting for the socket as net.Conn's Write does.
func (s *sockIO) Write(b []byte) (int, error) {
	s.wbuf, s.wn, s.werr = b, 0, nil
	err := s.rc.Write(s.wfn)
	n := s.wn
	if err == nil {
		err = s.werr
	}
	s.wbuf, s.werr = nil, nil
	return n, err
}

func (s *sockIO) writeAll(fd uintptr) bool {
	if !s.writeNow(fd) {
		return true // failed
	}
	return s.wn == len(s.wbuf) // else wait until the socket takes more
}

// writeNow writes what the socket takes of s.wbuf[s.wn:] now; false when
// the write failed (s.werr).
func (s *sockIO) writeNow(fd uintptr) bool {
	for s.wn < len(s.wbuf) {
		n, err := rawio.SysWrite(fd, s.wbuf[s.wn:])
		if n > 0 {
			s.wn += n
		}
		switch err {
		case nil:
			if n <= 0 {
				return true // no progress; the caller decides
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			return true
		default:
			s.werr = err
			return false
		}
	}
	return true
}

// tryWrite writes what the socket takes of b now and returns how much.
func (s *sockIO) tryWrite(b []byte) (int, error) {
	s.wbuf, s.wn, s.werr = b, 0, nil
	err := s.rc.Write(s.tfn)
	n := s.wn
	if err == nil {
		err = s.werr
	}
	s.wbuf, s.werr = nil, nil
	return n, err
}

// sockReader returns what a connection reads from: br's buffered bytes
// (the handshake's reader may hold the first frames), then the socket
// through s.
func sockReader(br *bufio.Reader, s *sockIO) io.Reader {
	if s == nil {
		return br
	}
	return &drainReader{br: br, s: s}
}

type drainReader struct {
	br *bufio.Reader
	s  *sockIO
}

func (d *drainReader) Read(p []byte) (int, error) {
	if d.br != nil {
		if d.br.Buffered() > 0 {
			return d.br.Read(p)
		}
		d.br = nil
	}
	return d.s.Read(p)
}
