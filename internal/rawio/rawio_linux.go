//go:build linux

package rawio

import (
	"os"
	"syscall"
	"unsafe"
)

const supported = true

// SysRead is read(2) on fd, made with syscall.RawSyscall: for a
// non-blocking socket only (it must not block).
func SysRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// SysWrite is write(2) on fd, made with syscall.RawSyscall: for a
// non-blocking socket only (it must not block).
func SysWrite(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func wrapSyscallError(op string, errno syscall.Errno) error { return os.NewSyscallError(op, errno) }
