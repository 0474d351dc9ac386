//go:build unix

package serve

import (
	"errors"
	"net"
	"syscall"
)

// aliveCheck returns a check that c's peer has not closed it (nor sent
// anything): a non-blocking read that finds nothing to read.
func aliveCheck(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() bool { return true }
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return true }
	}
	var buf [1]byte
	var alive bool
	read := func(fd uintptr) bool {
		_, err := syscall.Read(int(fd), buf[:])
		alive = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true // done: never wait
	}
	return func() bool {
		alive = false
		if err := rc.Read(read); err != nil {
			return false
		}
		return alive
	}
}
