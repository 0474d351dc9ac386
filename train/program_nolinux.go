//go:build !linux

package train

// lockThread is needed only where dieWithParent uses Pdeathsig (Linux).
func lockThread() (unlock func()) { return func() {} }
