// Package rawio reads and writes plain sockets with the read and write
// system calls made directly on the socket (through its syscall.RawConn),
// waiting for it in the runtime's poller as net.Conn does, deadlines and
// Close included.
//
// On Linux the calls are made with syscall.RawSyscall (on other Unix
// systems with the syscall package's Read and Write): on a non-blocking
// socket they do not block, so the runtime need not hand the processor
// off around them, and entering a system call after an idle moment does
// not wake the runtime's monitor thread, which then polls every 20 µs.
// For a proxy or a protocol that sends small messages back and forth,
// that is a good part of the cost of each message besides the kernel's.
package rawio

import (
	"io"
	"net"
	"syscall"
)

// Conn is a net.Conn whose Read and Write go through the socket's raw
// connection. One Read and one Write may run at once (as with net.Conn,
// a Read and a Write may run concurrently; two Reads may not).
type Conn struct {
	net.Conn
	rc syscall.RawConn

	rfn, wfn, tfn func(fd uintptr) bool
	rbuf          []byte
	rn            int
	rerr          error
	wbuf          []byte
	wn            int
	werr          error
}

// Wrap returns c as a *Conn, or c itself when it is not a plain socket
// (a *tls.Conn, a net.Pipe) or the platform is not a Unix system.
func Wrap(c net.Conn) net.Conn {
	if !supported {
		return c
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return c // a wrapper of its own may count or change bytes
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &Conn{Conn: c, rc: rc}
	rw.rfn, rw.wfn = rw.read, rw.write
	rw.tfn = func(fd uintptr) bool {
		rw.write(fd)
		return true // never wait
	}
	return rw
}

// Read reads from the socket, waiting for data as net.Conn's Read does.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rbuf, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.rfn)
	n := c.rn
	if err == nil {
		err = c.rerr
	}
	c.rbuf, c.rerr = nil, nil
	return n, opError("read", c, err)
}

func (c *Conn) read(fd uintptr) bool {
	for {
		n, err := SysRead(fd, c.rbuf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // wait for data
		case err != nil:
			c.rerr = err
		case n == 0:
			c.rerr = io.EOF
		default:
			c.rn = n
		}
		return true
	}
}

// Write writes b whole, waiting for the socket as net.Conn's Write does.
func (c *Conn) Write(b []byte) (int, error) {
	c.wbuf, c.wn, c.werr = b, 0, nil
	err := c.rc.Write(c.wfn)
	n := c.wn
	if err == nil {
		err = c.werr
	}
	c.wbuf, c.werr = nil, nil
	return n, opError("write", c, err)
}

// TryWrite writes what the socket takes of b now, without waiting, and
// returns how much (0 and no error when it takes nothing).
func (c *Conn) TryWrite(b []byte) (int, error) {
	c.wbuf, c.wn, c.werr = b, 0, nil
	err := c.rc.Write(c.tfn)
	n := c.wn
	if err == nil {
		err = c.werr
	}
	c.wbuf, c.werr = nil, nil
	return n, opError("write", c, err)
}

// write writes what the socket takes of c.wbuf[c.wn:]; false when it
// must wait for the socket to take more.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		n, err := SysWrite(fd, c.wbuf[c.wn:])
		if n > 0 {
			c.wn += n
		}
		switch err {
		case nil:
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until the socket takes more
		default:
			c.werr = err
			return true
		}
	}
	return true
}

// opError wraps a system call's error as net.Conn's methods do (a
// *net.OpError naming the addresses), so that errors.Is and net.Error's
// Timeout work on it; io.EOF and nil pass through.
func opError(op string, c *Conn, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if _, ok := err.(*net.OpError); ok {
		return err
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = wrapSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SyscallConn returns the socket's raw connection.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// CloseWrite shuts down the writing side of the socket, when the
// connection has one (TCP and Unix sockets).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Unwrap returns the net.Conn c wraps.
func (c *Conn) Unwrap() net.Conn { return c.Conn }
