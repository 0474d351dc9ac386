//go:build unix && !linux

package worker

import "syscall"

func sysRead(fd uintptr, p []byte) (int, error)  { return syscall.Read(int(fd), p) }
func sysWrite(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }
