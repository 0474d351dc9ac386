//go:build linux

package rawio

import (
	"os"
	"syscall"
	"unsafe"
)

const supported = true

func sysRead(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func sysWrite(fd uintptr, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func wrapSyscallError(op string, errno syscall.Errno) error { return os.NewSyscallError(op, errno) }
