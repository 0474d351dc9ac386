//go:build linux

package worker

import (
	"syscall"
	"unsafe"
)

// sysRead and sysWrite are read(2) and write(2) on a non-blocking socket,
// without entering the runtime's syscall state: they do not block, so
// the processor need not be handed off, and the runtime's monitor thread
// is not woken for them.
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
