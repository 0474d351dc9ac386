package worker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// ProcessOptions configures [StartProcess].
type ProcessOptions struct {
	// Path is the worker's executable; "" means this program
	// (os.Executable), which is what makes tasks and actors resolve: the
	// worker registers the same names at init.
	Path string
	// Args are the worker's arguments.
	Args []string
	// Env is added to the environment the worker inherits.
	Env []string
	// Addr is the address the worker listens on; "" means 127.0.0.1:0,
	// loopback on a port the kernel picks.
	Addr string
	// Stdout and Stderr receive the worker's output; nil means this
	// process's. The worker logs to its stderr.
	Stdout, Stderr io.Writer
	// LogLevel is the worker's log level (see EnvLogLevel); "" means warn.
	LogLevel string
	// StartTimeout bounds the start, from launch to a connected client;
	// 0 means 30s. The context passed to StartProcess bounds it too.
	StartTimeout time.Duration
	// IdleTimeout is how long the worker waits without a driver before it
	// exits; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Client configures the connection. An empty Token is replaced by a
	// random one, handed to the worker in its environment.
	Client ClientOptions
}

// Process is a worker process started by [StartProcess], with its client.
// The process holds the read end of a lifeline pipe: it exits at once when
// this process dies or calls Stop, so workers never outlive their driver.
//
// A Process is safe for concurrent use.
type Process struct {
	cmd      *exec.Cmd
	client   *Client
	lifeline *os.File
	tail     *tailBuffer
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// StartProcess launches a worker process and connects to it. The worker is
// the program at opts.Path (this program by default), whose main must call
// ray.Main first.
//
// Errors: FailedPrecondition when this process is itself a launched worker
// (its main did not call ray.Main, and launching would recurse), or when
// the worker refuses the connection; Unavailable when the process fails to
// start or exits before serving (the message quotes its stderr);
// DeadlineExceeded when it does not start within StartTimeout.
func StartProcess(ctx context.Context, opts *ProcessOptions) (*Process, error) {
	const op = "start worker process"
	if Launched() {
		return nil, backend.Errorf(backend.FailedPrecondition, op,
			"this process was launched as a goray worker but runs the program's main instead of serving: call ray.Main() first in main (and in TestMain)")
	}
	if opts == nil {
		opts = &ProcessOptions{}
	}
	path := opts.Path
	if path == "" {
		var err error
		if path, err = os.Executable(); err != nil {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "find this program's executable: %w", err)
		}
	}
	copts := opts.Client
	if copts.Token == "" {
		copts.Token = NewToken()
	}
	if len(copts.Token) > maxTokenSize {
		return nil, backend.Errorf(backend.InvalidArgument, op, "token of %d bytes: at most %d", len(copts.Token), maxTokenSize)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, backend.Errorf(backend.Unavailable, op, "%w", err)
	}
	defer readyR.Close()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, backend.Errorf(backend.Unavailable, op, "%w", err)
	}
	// The token goes through a pipe, never the environment, which the
	// worker's user can read in /proc/<pid>/environ. It fits the pipe's
	// buffer, so it is written and closed before the worker starts.
	tokR, tokW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		lifeR.Close()
		lifeW.Close()
		return nil, backend.Errorf(backend.Unavailable, op, "%w", err)
	}
	_, err = io.WriteString(tokW, copts.Token)
	tokW.Close()
	if err != nil {
		readyW.Close()
		lifeR.Close()
		lifeW.Close()
		tokR.Close()
		return nil, backend.Errorf(backend.Unavailable, op, "hand over the token: %w", err)
	}
	p := &Process{lifeline: lifeW, tail: &tailBuffer{}, exited: make(chan struct{})}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	cmd := exec.Command(path, opts.Args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		// A worker built with -race would otherwise linger 1s at exit.
		cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
	cmd.Env = append(cmd.Env,
		EnvAddr+"="+addr,
		EnvTokenFD+"=5",
		EnvReadyFD+"=3",
		EnvLifelineFD+"=4",
	)
	if copts.MaxMessageSize > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", EnvMaxMessageSize, copts.MaxMessageSize))
	}
	if opts.IdleTimeout > 0 {
		cmd.Env = append(cmd.Env, EnvIdleTimeout+"="+opts.IdleTimeout.String())
	}
	if opts.LogLevel != "" {
		cmd.Env = append(cmd.Env, EnvLogLevel+"="+opts.LogLevel)
	}
	cmd.ExtraFiles = []*os.File{readyW, lifeR, tokR}
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(stderr, p.tail)
	cmd.WaitDelay = time.Second // do not wait on grandchildren holding the output open
	detach(cmd)
	p.cmd = cmd
	err = cmd.Start()
	readyW.Close()
	lifeR.Close()
	tokR.Close()
	if err != nil {
		lifeW.Close()
		return nil, backend.Errorf(backend.Unavailable, op, "start %s: %w", path, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		// The reaped process no longer needs its lifeline: release the
		// descriptor now rather than at Stop, which a caller may never
		// call for a process that died.
		p.lifeline.Close()
		close(p.exited)
	}()

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(io.LimitReader(readyR, 1024)).ReadString('\n')
		line <- s
	}()
	var workerAddr string
	select {
	case s := <-line:
		a, ok := strings.CutPrefix(strings.TrimSpace(s), readyPrefix)
		if !ok {
			p.kill()
			<-p.exited
			return nil, backend.Errorf(backend.Unavailable, op, "worker %s (pid %d) exited before serving (%v): does its main call ray.Main() first?%s", path, cmd.Process.Pid, p.waitErr, p.tail.quote())
		}
		workerAddr = a
	case <-ctx.Done():
		p.kill()
		<-p.exited
		readyR.Close()
		<-line
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, backend.Errorf(backend.DeadlineExceeded, op, "worker %s (pid %d) did not start serving within %v: does its main call ray.Main() first?%s", path, cmd.Process.Pid, timeout, p.tail.quote())
		}
		return nil, ctx.Err()
	}
	c, err := Dial(ctx, workerAddr, &copts)
	if err != nil {
		p.kill()
		<-p.exited
		return nil, err
	}
	p.client = c
	return p, nil
}

// NewToken returns a random 256-bit token, hex encoded.
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Client returns the connection to the worker.
func (p *Process) Client() *Client { return p.client }

// PID returns the worker's process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitError returns how the process exited (nil for status 0), once
// Exited is closed.
func (p *Process) ExitError() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return nil
	}
}

// Kill kills the process with SIGKILL, as a failure would.
func (p *Process) Kill() error { return p.kill() }

func (p *Process) kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Stop closes the client and the lifeline, which makes the worker exit,
// waits up to timeout for it to exit, then kills it, and returns after it
// has been reaped. It is idempotent.
func (p *Process) Stop(timeout time.Duration) {
	p.stopOnce.Do(func() {
		if p.client != nil {
			p.client.Close()
		}
		p.lifeline.Close()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			p.kill()
		}
	})
	<-p.exited
}

// tailBuffer keeps the last bytes written to it, to quote a failed
// worker's stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) quote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "; its stderr ends with:\n" + s
}
