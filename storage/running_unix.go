//go:build unix

package storage

import (
	"errors"
	"syscall"
)

// processRunning reports whether a process with the given PID runs (or
// may: one this process may not signal counts as running).
func processRunning(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
