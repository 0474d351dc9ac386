package train

import (
	"runtime"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the program when the worker
// process that started it dies (a crash, an OOM kill, a deleted pod's
// process): in a process group of its own it would otherwise run on,
// holding its chips and ports, with nobody to stop it.
//
// The signal is tied to the thread that started the program, so the
// program is started and waited for from a goroutine locked to its
// thread (see lockThread): the Go runtime ends a thread only when a
// goroutine locked to it exits locked.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// lockThread locks the calling goroutine to its thread until the
// returned function is called.
func lockThread() (unlock func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
