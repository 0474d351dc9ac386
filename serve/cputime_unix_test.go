//go:build unix

package serve_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) the process has used: the
// client's and the server's, which a loaded machine does not inflate as it
// does wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
