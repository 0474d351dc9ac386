package train

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// Metrics are the named numbers a worker reports, such as "loss".
type Metrics map[string]float64

// Loop is a registered training loop with a configuration of type C.
// Create it with [NewLoop] at package level, so that every process of the
// program (driver and worker processes) registers it under the same name.
// A *Loop is immutable and safe for concurrent use.
type Loop[C any] struct{ name string }

// Name returns the loop's registered name.
func (l *Loop[C]) Name() string { return l.name }

type loopFunc func(ctx context.Context, w *Worker, cfg json.RawMessage) error

var loops = struct {
	sync.RWMutex
	m map[string]loopFunc
}{m: map[string]loopFunc{}}

// NewLoop registers fn as the training loop named name. Every worker of a
// run calls fn with its [Worker] and the run's configuration, which crosses
// to the workers as JSON. NewLoop panics on an empty or duplicate name; call
// it from package initialization.
func NewLoop[C any](name string, fn func(ctx context.Context, w *Worker, cfg C) error) *Loop[C] {
	if name == "" || fn == nil {
		panic("train: NewLoop needs a name and a function")
	}
	loops.Lock()
	defer loops.Unlock()
	if _, dup := loops.m[name]; dup {
		panic("train: NewLoop: duplicate loop name " + strconv.Quote(name))
	}
	loops.m[name] = func(ctx context.Context, w *Worker, raw json.RawMessage) error {
		var cfg C
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &cfg); err != nil {
				return backend.Errorf(backend.InvalidArgument, "", "train: loop %s: decode its %T configuration: %w", name, cfg, err)
			}
		}
		return fn(ctx, w, cfg)
	}
	return &Loop[C]{name: name}
}

// workerInput is what each worker's task gets: everything it needs is
// derived from the live reservation and the attempt, never from a
// previous one.
type workerInput struct {
	Run        string            `json:"run"`
	Loop       string            `json:"loop,omitempty"`
	Config     json.RawMessage   `json:"config,omitempty"`
	Program    *Program          `json:"program,omitempty"`
	Rendezvous string            `json:"rendezvous"`
	Token      string            `json:"token"`
	Attempt    int               `json:"attempt"`
	Rank       int               `json:"rank"`
	WorldSize  int               `json:"world_size"`
	SliceIndex int               `json:"slice_index"`
	NumSlices  int               `json:"num_slices"`
	Env        map[string]string `json:"env"`
	Resume     *Checkpoint       `json:"resume,omitempty"`
	Verdict    time.Duration     `json:"verdict"`
	// Datasets are the run's datasets: their row types and where this
	// rank starts in each.
	Datasets map[string]shardInput `json:"datasets,omitempty"`
}

// holdWorker, set by tests, runs in each in-process worker before it
// joins the run: a worker it holds until ctx ends is one whose task never
// reached the rendezvous.
var holdWorker atomic.Pointer[func(ctx context.Context, rank int)]

// workerTask runs one worker of a run on its host.
var workerTask = ray.NewTask("goray.train.worker", runWorker)

// Worker is a training loop's view of the run: who it is, the env of its
// host, the checkpoint to resume from, reporting, and (through [AllReduce],
// [Broadcast], [AllGather] and [Worker.Barrier]) collectives among the
// run's workers. It is valid only during the loop call. Its methods are
// safe for concurrent use, but collectives run one at a time.
type Worker struct {
	in   *workerInput
	sess *session
	ring *ring
	env  map[string]string

	reportMu  sync.Mutex
	iteration int

	shards map[string]*shardState // the run's datasets; fixed for the loop call
	done   atomic.Bool            // the loop returned
	connMu sync.Mutex
	conns  map[net.Conn]bool // open shard connections
}

// Rank is the worker's index among all workers of the run: slice by slice,
// in worker-ID order within a slice.
func (w *Worker) Rank() int { return w.in.Rank }

// WorldSize is the number of workers: one per host of every slice.
func (w *Worker) WorldSize() int { return w.in.WorldSize }

// SliceIndex is the index of the worker's slice (MEGASCALE_SLICE_ID).
func (w *Worker) SliceIndex() int { return w.in.SliceIndex }

// NumSlices is the number of slices of the run.
func (w *Worker) NumSlices() int { return w.in.NumSlices }

// Attempt is the 0-based attempt: it counts up after every restart.
func (w *Worker) Attempt() int { return w.in.Attempt }

// RunName is the run's name.
func (w *Worker) RunName() string { return w.in.Run }

// Env returns a copy of the host's env: TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES, TPU_NAME, TPU_TOPOLOGY, ..., and for multislice
// MEGASCALE_*, computed from this attempt's reservation.
func (w *Worker) Env() map[string]string { return maps.Clone(w.env) }

// Getenv returns one variable of [Worker.Env].
func (w *Worker) Getenv(key string) string { return w.env[key] }

// Checkpoint returns the checkpoint this attempt resumes from, or nil for a
// fresh start. Read its data with [Worker.LoadCheckpoint].
func (w *Worker) Checkpoint() *Checkpoint { return w.in.Resume }

// Iteration is the number of the last report (0 before the first): it
// continues from the resumed checkpoint's iteration.
func (w *Worker) Iteration() int {
	w.reportMu.Lock()
	defer w.reportMu.Unlock()
	return w.iteration
}

// LoadCheckpoint returns the data this worker's rank saved in the resumed
// checkpoint, or rank 0's if this rank saved none; nil data and a nil
// error when there is no checkpoint. The data comes through the driver, so
// workers need no access to the checkpoint storage.
func (w *Worker) LoadCheckpoint(ctx context.Context) ([]byte, error) {
	ck := w.in.Resume
	if ck == nil {
		return nil, nil
	}
	rank := 0
	if ck.hasRank(w.in.Rank) {
		rank = w.in.Rank
	}
	r, err := w.sess.request(ctx, &ctrlMsg{Type: msgLoad, Iteration: ck.Iteration, Rank: rank})
	if err != nil {
		return nil, fmt.Errorf("train: load checkpoint %d: %w", ck.Iteration, err)
	}
	return r.Data, nil
}

// Report sends one iteration's metrics, and optionally this rank's
// checkpoint data, to the driver, and returns once the driver has stored
// them. Every worker must call Report the same number of times: the N-th
// calls of all ranks form iteration N, whose checkpoint is complete (and
// used for resuming) once every rank has reported it. Rank 0's metrics are
// the run's. Pass nil data to report metrics only; typically only rank 0
// saves data in data-parallel training.
func (w *Worker) Report(ctx context.Context, metrics Metrics, checkpoint []byte) error {
	w.reportMu.Lock()
	defer w.reportMu.Unlock()
	it := w.iteration + 1
	_, err := w.sess.request(ctx, &ctrlMsg{Type: msgReport, Iteration: it, Metrics: metrics, Data: checkpoint, HasData: checkpoint != nil, Positions: w.positions()})
	if err != nil {
		return fmt.Errorf("train: report iteration %d: %w", it, err)
	}
	w.iteration = it
	return nil
}

func runWorker(ctx context.Context, in workerInput) (struct{}, error) {
	var fn loopFunc
	if in.Program == nil {
		loops.RLock()
		fn = loops.m[in.Loop]
		loops.RUnlock()
		if fn == nil {
			return struct{}{}, backend.Errorf(backend.NotFound, "", "train: no loop named %q is registered in this process (register it with train.NewLoop at package level)", in.Loop)
		}
	}
	if hold := holdWorker.Load(); hold != nil {
		(*hold)(ctx, in.Rank)
	}
	sess, err := dialSession(ctx, in.Rendezvous)
	if err != nil {
		return struct{}{}, err
	}
	w := &Worker{in: &in, sess: sess, env: map[string]string{}}
	if rc, ok := ray.Runtime(ctx); ok {
		w.env = rc.Environ()
	}
	maps.Copy(w.env, in.Env)
	if in.Resume != nil {
		w.iteration = in.Resume.Iteration
	}
	if len(in.Datasets) > 0 {
		w.shards = make(map[string]*shardState, len(in.Datasets))
		for name, d := range in.Datasets {
			w.shards[name] = &shardState{name: name, rowType: d.RowType, pos: d.Start}
		}
	}
	err = w.run(ctx, fn)
	w.done.Store(true)
	canceled := ctx.Err() != nil
	if canceled && err != nil {
		err = fmt.Errorf("train: rank %d was stopped: %w", in.Rank, context.Cause(ctx))
	}
	sess.leave(err, canceled)
	return struct{}{}, err
}

func (w *Worker) run(ctx context.Context, fn loopFunc) (err error) {
	in := w.in
	ln, err := net.Listen("tcp", net.JoinHostPort(w.sess.localIP(), "0"))
	if err != nil {
		return withCode(backend.Unavailable, fmt.Errorf("train: rank %d: listen for peers: %w", in.Rank, err))
	}
	w.ring = newRing(in.Rank, in.WorldSize, w.sess, ln, in.Verdict)
	defer w.ring.close()
	// An abort from the driver fails pending collectives and cancels the
	// loop's context (which stops an external program).
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.sess.start(func(err error) {
		w.ring.fail(err)
		w.closeShardConns()
		cancel(err)
	})
	addr := ln.Addr().String()
	if in.Program != nil {
		ln.Close() // the port becomes the program's coordinator port
	}
	peers, err := w.sess.request(ctx, &ctrlMsg{Type: msgJoin, Token: in.Token, Attempt: in.Attempt, Rank: in.Rank, Addr: addr})
	if err != nil {
		return fmt.Errorf("train: rank %d: join the run: %w", in.Rank, err)
	}
	if len(peers.Addrs) != in.WorldSize {
		return backend.Errorf(backend.Internal, "", "train: rank %d: the driver sent %d peer addresses for %d workers", in.Rank, len(peers.Addrs), in.WorldSize)
	}
	if in.Program != nil {
		return runProgram(ctx, w, peers.Addrs[0])
	}
	if err := w.ring.connect(ctx, peers.Addrs, in.Token); err != nil {
		return withCode(backend.Unavailable, fmt.Errorf("train: rank %d: connect the ring: %w", in.Rank, err))
	}
	defer func() {
		if p := recover(); p != nil {
			// One line for the message; the stack goes with the task's
			// error (errors.As to *ray.TaskError, its Stack).
			err = &backend.TaskError{Task: in.Loop, Attempt: in.Attempt, Panicked: true,
				Message: fmt.Sprintf("loop %s panicked: %v", in.Loop, p), Stack: string(debug.Stack())}
		}
	}()
	return fn(ctx, w, in.Config)
}
