//go:build unix && !linux

package rawio

import (
	"os"
	"syscall"
)

// SysRead and SysWrite are the syscall package's here.
const supported = true

// SysRead is read(2) on fd.
func SysRead(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p) }

// SysWrite is write(2) on fd.
func SysWrite(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }

func wrapSyscallError(op string, errno syscall.Errno) error { return os.NewSyscallError(op, errno) }
