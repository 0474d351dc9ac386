//go:build unix

package train

import (
	"os/exec"
	"syscall"
	"time"
)

// stopGroup runs cmd in its own process group and stops the whole group
// (the program and anything it started) with SIGTERM when its context
// ends; exec kills it after the wait delay. Where the system can (Linux),
// the program is also killed when the worker process that started it dies
// without stopping it (see dieWithParent).
func stopGroup(cmd *exec.Cmd, _ time.Duration) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
}

// processGone reports whether no process pid exists (kill(pid, 0) fails
// with ESRCH); a process of another user is not gone.
func processGone(pid int) bool {
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
