package worker

import (
	"bufio"
	"io"
	"net"

	"github.com/goray-dev/goray/internal/rawio"
)

// sockIO reads and writes a plain socket (not TLS) through its raw
// connection (internal/rawio): reads and writes wait for the socket in
// the runtime's poller as net.Conn's do, and TryWrite writes only what
// the socket takes at once. On Linux the system calls are made without
// the runtime's syscall bookkeeping: a socket's reads and writes do not
// block, and entering a syscall wakes the runtime's monitor thread
// whenever the process was idle just before, which is every burst of
// frames of a connection that alternates with its peer.
type sockIO = rawio.Conn

// newSockIO returns a sockIO for nc, or nil when nc is not a plain socket
// (TLS) or the platform has none: net.Conn's Read and Write serve it,
// and the writer goroutine writes what a reader queued.
func newSockIO(nc net.Conn) *sockIO {
	s, _ := rawio.Wrap(nc).(*rawio.Conn)
	return s
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
