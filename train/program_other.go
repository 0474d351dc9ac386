//go:build !unix

package train

import (
	"os/exec"
	"time"
)

// stopGroup keeps exec's default: the process is killed when its context
// ends.
func stopGroup(*exec.Cmd, time.Duration) {}
