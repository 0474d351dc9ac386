//go:build !unix

package rawio

import "syscall"

// Elsewhere net.Conn's own Read and Write serve (Wrap returns the
// connection itself).
const supported = false

// SysRead is not available here: it fails with EINVAL.
func SysRead(fd uintptr, p []byte) (int, error) { return 0, syscall.EINVAL }

// SysWrite is not available here: it fails with EINVAL.
func SysWrite(fd uintptr, p []byte) (int, error) { return 0, syscall.EINVAL }

func wrapSyscallError(op string, errno syscall.Errno) error { return errno }
