//go:build !linux

package rawio

import "syscall"

// Elsewhere net.Conn's own Read and Write serve (Wrap returns the
// connection itself).
const supported = false

func sysRead(fd uintptr, p []byte) (int, error)             { return 0, syscall.EINVAL }
func sysWrite(fd uintptr, p []byte) (int, error)            { return 0, syscall.EINVAL }
func wrapSyscallError(op string, errno syscall.Errno) error { return errno }
