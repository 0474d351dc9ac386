//go:build unix && !linux

package train

import "syscall"

// dieWithParent does nothing here: only Linux has a parent-death signal
// that exec sets.
func dieWithParent(*syscall.SysProcAttr) {}
