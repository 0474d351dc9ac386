//go:build !unix

package train

import (
	"os/exec"
	"time"
)

// stopGroup keeps exec's default: the process is killed when its context
// ends.
func stopGroup(*exec.Cmd, time.Duration) {}

// processGone reports false: without a way to tell, no directory of
// another process is removed (reapPyDirs).
func processGone(int) bool { return false }
