//go:build e2e

package kubeharness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one child process the harness started: a control-plane
// component or a pod's container. It runs in its own process group, so that
// the terminal's SIGINT does not reach it and so that stopping it also stops
// whatever it spawned; it is only ever signalled through its own PID (as
// -PGID). It also has PR_SET_PDEATHSIG=SIGKILL, so it dies with the test
// binary even when no cleanup runs (go test -timeout, a panic on a
// background goroutine, SIGKILL).
//
// A process is safe for concurrent use.
type process struct {
	name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed when the process has been reaped

	mu    sync.Mutex
	state *os.ProcessState
	err   error // from Wait, other than a non-zero exit
}

// The Linux parent-death signal fires when the *thread* that forked the
// child exits, not the process. Go may retire threads, so every child is
// forked from one goroutine locked to its OS thread for the life of the
// test binary.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

func spawner() {
	runtime.LockOSThread() // never unlocked: this thread lives as long as the binary
	for r := range spawnCh {
		r.reply <- r.cmd.Start()
	}
}

// startProcess starts cmd in its own process group with a parent-death
// signal and reaps it in the background.
func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go spawner()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	reply := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, reply: reply}
	if err := <-reply; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			p.err = err
		}
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// signal sends sig to the process group of p, if p has not been reaped yet
// (after reaping the PID may belong to someone else).
func (p *process) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	// -pid: the whole group p leads; it was created by Setpgid for p alone.
	if err := syscall.Kill(-p.pid, sig); err != nil {
		_ = syscall.Kill(p.pid, sig)
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs the process group and
// waits for the process to be reaped. grace 0 kills at once.
func (p *process) stop(grace time.Duration) {
	if grace > 0 {
		p.signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			// The leader is gone; make sure nothing it spawned lingers.
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			return
		case <-t.C:
		}
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

// exited reports whether p has been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitStatus returns the exit code (128+signal for a signalled process, as
// container runtimes report it) and the signal, once p has exited.
func (p *process) exitStatus() (code int, sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return -1, 0
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return p.state.ExitCode(), 0
}
