//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// detach puts the worker in its own process group, so that a terminal's
// Ctrl-C reaches the driver only; the worker exits through its lifeline
// when the driver does.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
