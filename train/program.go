package train

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/samber/lo"

	"github.com/goray-dev/goray/backend"
)

// Program is an external program that a run starts for every worker (one
// per host, or one per TPU process, see ScalingConfig.ResourcesPerWorker),
// for example python3 running JAX. Each process gets its TPU env
// (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_PROCESS_ADDRESSES on v7x,
// MEGASCALE_*, ... of the live reservation) plus:
//
//	JAX_COORDINATOR_ADDRESS  host:port of rank 0
//	JAX_NUM_PROCESSES        the world size
//	JAX_PROCESS_ID           the rank
//	GORAY_TRAIN_RANK, GORAY_TRAIN_WORLD_SIZE, GORAY_TRAIN_SLICE_INDEX,
//	GORAY_TRAIN_RUN, GORAY_TRAIN_ATTEMPT
//	GORAY_TRAIN_ENDPOINT     http://host:port of the driver's report endpoint
//	GORAY_TRAIN_TOKEN        the attempt's token for it
//	PYTHONPATH               with goray_train, the endpoint's Python client, first
//
// A program reports metrics, commits checkpoint directories and reads the
// checkpoint to resume from through that endpoint (HTTP and JSON, see
// docs/train.md; in Python: import goray_train).
//
// on top of the worker process's own environment and Env. Of these, JAX
// reads only JAX_COORDINATOR_ADDRESS by itself: jax.distributed.initialize()
// on a TPU host takes the process count and ID from the TPU env (its
// cluster detection: TPU_PROCESS_ADDRESSES or TPU_WORKER_HOSTNAMES,
// TPU_WORKER_ID, MEGASCALE_*), which gives the same numbers as the rank
// and the world size. Where TPU detection does not apply (CPU JAX on the
// simulator) pass JAX_NUM_PROCESSES and JAX_PROCESS_ID to initialize
// yourself, as num_processes and process_id (docs/train.md has the
// recipe). Its stdout and
// stderr reach the driver line by line, prefixed with "[rank N] ". The
// run fails as soon as one process exits non-zero; the others are then
// stopped (SIGTERM to the process group, SIGKILL after StopTimeout). On
// Linux a process is also killed when the worker process that started it
// dies without stopping it.
type Program struct {
	// Path is the program, looked up in PATH when it has no slash.
	Path string `json:"path"`
	// Args are its arguments.
	Args []string `json:"args,omitempty"`
	// Dir is its working directory; empty means the worker's.
	Dir string `json:"dir,omitempty"`
	// Env is added to every process's environment.
	Env map[string]string `json:"env,omitempty"`
	// StopTimeout is how long a stopped process may take to exit after
	// SIGTERM before it is killed; 0 means 5s.
	StopTimeout time.Duration `json:"stop_timeout,omitempty"`
}

// pythonModule is goray_train, the report protocol's client for Python
// programs (python/goray_train.py).
//
//go:embed python/goray_train.py
var pythonModule []byte

// programEnv is the environment of rank's process.
func programEnv(w *Worker, coordinator, pythonPath string) []string {
	in := w.in
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	maps.Copy(env, w.env)
	maps.Copy(env, map[string]string{
		"JAX_COORDINATOR_ADDRESS": coordinator,
		"JAX_NUM_PROCESSES":       strconv.Itoa(in.WorldSize),
		"JAX_PROCESS_ID":          strconv.Itoa(in.Rank),
		"GORAY_TRAIN_RANK":        strconv.Itoa(in.Rank),
		"GORAY_TRAIN_WORLD_SIZE":  strconv.Itoa(in.WorldSize),
		"GORAY_TRAIN_SLICE_INDEX": strconv.Itoa(in.SliceIndex),
		"GORAY_TRAIN_RUN":         in.Run,
		"GORAY_TRAIN_ATTEMPT":     strconv.Itoa(in.Attempt),
		"GORAY_TRAIN_ENDPOINT":    "http://" + in.Rendezvous,
		"GORAY_TRAIN_TOKEN":       in.Token,
	})
	if pythonPath != "" {
		if old := env["PYTHONPATH"]; old != "" {
			pythonPath += string(os.PathListSeparator) + old
		}
		env["PYTHONPATH"] = pythonPath
	}
	maps.Copy(env, in.Program.Env)
	return lo.Map(slices.Sorted(maps.Keys(env)), func(k string, _ int) string { return k + "=" + env[k] })
}

// runProgram runs the worker's program and waits for it; cancelling ctx
// stops it.
func runProgram(ctx context.Context, w *Worker, coordinator string) error {
	p := w.in.Program
	// goray_train, the report module for Python programs, goes on their
	// PYTHONPATH from a directory of this process's own.
	pyDir, err := newPyDir()
	if err != nil {
		return withCode(backend.Unavailable, fmt.Errorf("train: rank %d: a directory for goray_train.py: %w", w.in.Rank, err))
	}
	defer os.RemoveAll(pyDir)
	if err := os.WriteFile(filepath.Join(pyDir, "goray_train.py"), pythonModule, 0o644); err != nil {
		return withCode(backend.Unavailable, fmt.Errorf("train: rank %d: write goray_train.py: %w", w.in.Rank, err))
	}
	cmd := exec.CommandContext(ctx, p.Path, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = programEnv(w, coordinator, pyDir)
	stop := p.StopTimeout
	if stop <= 0 {
		stop = 5 * time.Second
	}
	cmd.WaitDelay = stop
	stopGroup(cmd, stop)
	lw := &lineWriter{send: func(line string) { w.sess.notify(&ctrlMsg{Type: msgOutput, Line: line}) }}
	cmd.Stdout, cmd.Stderr = lw, lw
	unlock := lockThread() // the thread that starts the program outlives it (dieWithParent)
	err = cmd.Run()
	unlock()
	lw.flush()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("train: rank %d: program %s stopped: %w", w.in.Rank, p.Path, context.Cause(ctx))
		}
		return fmt.Errorf("train: rank %d: program %s: %w", w.in.Rank, p.Path, err)
	}
	return nil
}

// pyDirPrefix begins the name of a directory of goray_train.py, followed
// by the pid of the process that made it and a random suffix.
const pyDirPrefix = "goray-train-py-"

// newPyDir makes a directory for goray_train.py in the temporary
// directory, named with this process's pid, after removing those of
// processes that are gone: a worker process killed while its program ran
// (the OOM killer, a test's SIGKILL) never ran its deferred removal.
func newPyDir() (string, error) {
	reapPyDirs(os.TempDir())
	return os.MkdirTemp("", pyDirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// reapPyDirs removes the directories of goray_train.py in tmp whose
// process is gone. Those of live processes (and names without a pid) are
// left alone.
func reapPyDirs(tmp string) {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), pyDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 || n == os.Getpid() || !processGone(n) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
	}
}

// lineWriter splits a program's output into lines.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	send func(string)
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.send(string(bytes.TrimSuffix(l.buf[:i], []byte("\r"))))
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a very long line: pass it on in pieces
		l.send(string(l.buf))
		l.buf = l.buf[:0]
	}
	return len(b), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.send(string(l.buf))
		l.buf = nil
	}
}
