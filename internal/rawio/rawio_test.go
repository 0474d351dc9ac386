package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"
)

// pair returns a wrapped client connection and the server's end.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	w := Wrap(c)
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s
}

func TestWrap(t *testing.T) {
	is := is.New(t)
	c, _ := pair(t)
	_, raw := c.(*Conn)
	is.Equal(raw, supported)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	is.Equal(Wrap(a), a) // not a socket
}

func TestReadWrite(t *testing.T) {
	is := is.New(t)
	c, s := pair(t)
	// more than the socket buffers hold: Write waits for the reader
	big := bytes.Repeat([]byte("0123456789"), 1<<20)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(s, int64(len(big))))
		got <- b
	}()
	n, err := c.Write(big)
	is.NoErr(err)
	is.Equal(n, len(big))
	is.True(bytes.Equal(<-got, big))
	// and back, then EOF
	go func() {
		s.Write([]byte("hello"))
		s.Close()
	}()
	b, err := io.ReadAll(c)
	is.NoErr(err)
	is.Equal(string(b), "hello")
	n, err = c.Read(make([]byte, 1))
	is.Equal(n, 0)
	is.Equal(err, io.EOF)
}

func TestDeadlineAndClose(t *testing.T) {
	is := is.New(t)
	c, _ := pair(t)
	is.NoErr(c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	is.True(errors.As(err, &ne) && ne.Timeout())
	is.True(errors.Is(err, os.ErrDeadlineExceeded))
	is.NoErr(c.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // the read is most likely waiting; either way it must end
	c.Close()
	select {
	case err := <-done:
		is.True(errors.Is(err, net.ErrClosed))
	case <-time.After(10 * time.Second):
		t.Fatal("a read still waits after Close")
	}
}

func TestResetIsAnOpError(t *testing.T) {
	is := is.New(t)
	c, s := pair(t)
	s.(*net.TCPConn).SetLinger(0)
	s.Close() // RST
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	is.True(err != nil)
	if err != io.EOF {
		var op *net.OpError
		is.True(errors.As(err, &op))
		is.Equal(op.Op, "read")
		is.True(errors.Is(err, syscall.ECONNRESET))
	}
}

func TestCloseWriteAndSyscallConn(t *testing.T) {
	is := is.New(t)
	c, s := pair(t)
	is.NoErr(c.(interface{ CloseWrite() error }).CloseWrite())
	n, err := s.Read(make([]byte, 1))
	is.Equal(n, 0)
	is.Equal(err, io.EOF)
	_, err = c.(syscall.Conn).SyscallConn()
	is.NoErr(err)
}

func TestTryWrite(t *testing.T) {
	is := is.New(t)
	c, s := pair(t)
	if _, ok := c.(*Conn); !ok {
		t.Skip("no raw socket I/O on this platform")
	}
	is.NoErr(c.(*Conn).Conn.(*net.TCPConn).SetWriteBuffer(16 << 10))
	big := bytes.Repeat([]byte("x"), 8<<20)
	n, err := c.(*Conn).TryWrite(big)
	is.NoErr(err)
	is.True(n > 0 && n < len(big)) // what the socket took, no more
	n2, err := c.(*Conn).TryWrite(big)
	is.NoErr(err)
	is.Equal(n2, 0) // full: nothing, at once
	got, err := io.ReadAll(io.LimitReader(s, int64(n)))
	is.NoErr(err)
	is.Equal(len(got), n)
}
