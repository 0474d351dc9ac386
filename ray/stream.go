package ray

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// StreamTask is a registered streaming task: a function that yields values
// one by one, which the caller consumes as they arrive, like Ray's
// generator tasks (a remote function that yields). Create one with
// [NewStreamTask] at package initialization.
type StreamTask[I, O any] struct {
	name string
}

// DefaultStreamBuffer is how many values a streaming task may yield ahead of
// its caller unless [StreamBuffer] says otherwise.
const DefaultStreamBuffer = 16

// NewStreamTask registers fn as a streaming task named name. fn sends its
// values with yield, in order; yield blocks while [StreamBuffer] values wait
// unconsumed (backpressure: a slow caller pauses the task, which keeps its
// resources meanwhile) and returns an error once the caller has gone (the
// stream was closed or cancelled), which fn should return. Names, types and
// panics are as for [NewTask].
//
// Failure semantics: if fn returns an error after k values, the caller gets
// the k values, then the error (TaskFailed, or the panic's TaskError). If
// the task is lost to a system failure (its node or worker died), it is
// retried per [Retries] (3 by default), and the retry's first values, up to
// the number the caller already received, are dropped, so the caller sees no
// value twice: as in Ray, this needs fn to yield the same values in the same
// order for the same input.
func NewStreamTask[I, O any](name string, fn func(ctx context.Context, in I, yield func(O) error) error) *StreamTask[I, O] {
	if fn == nil {
		panic("ray: NewStreamTask " + name + ": nil function")
	}
	mustCross("NewStreamTask "+name, "input", reflect.TypeFor[I]())
	mustCross("NewStreamTask "+name, "output", reflect.TypeFor[O]())
	registerTask(&taskEntry{
		name: name,
		in:   reflect.TypeFor[I](),
		out:  reflect.TypeFor[O](),
		run: func(ctx context.Context, c Codec, arg backend.Value) (backend.Value, error) {
			return backend.Value{}, backend.Errorf(backend.InvalidArgument, "task "+name, "%q is a streaming task; call it with its StreamTask's Remote", name)
		},
		stream: func(ctx context.Context, c Codec, arg backend.Value, yield func(backend.Value) error) error {
			in, err := decode[I](c, arg)
			if err != nil {
				return backend.Errorf(backend.InvalidArgument, "task "+name, "input: %w", err)
			}
			return fn(ctx, in, func(o O) error {
				v, err := encode(c, o)
				if err != nil {
					return backend.Errorf(backend.InvalidArgument, "task "+name, "output: %w", err)
				}
				return yield(v)
			})
		},
	})
	return &StreamTask[I, O]{name: name}
}

// Name returns the task's registered name.
func (t *StreamTask[I, O]) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

// StreamBuffer is a streaming task option: how many values the task may
// yield ahead of its caller (default [DefaultStreamBuffer]; Ray's
// _generator_backpressure_num_objects). The caller holds at most as many
// more, received and not yet consumed.
type StreamBuffer int

func (b StreamBuffer) applyTask(s *backend.TaskSpec) {} // read by the streams' Remote; a plain task refuses it
func (b StreamBuffer) optionErr() error {
	if b < 1 {
		return fmt.Errorf("StreamBuffer(%d): must be at least 1", int(b))
	}
	return nil
}

// Remote starts the task with input in and returns its stream of values.
// The task's options are a task's ([Resources], [NodeSelector], [InBundle],
// [Retries]) and [StreamBuffer]. Errors starting it are the stream's first
// error. Consume the stream with [Stream.Next] or [Stream.All]; a stream
// not read to its end must be closed ([Stream.Close]; [Stream.All] does it)
// to stop the task and free its resources.
func (t *StreamTask[I, O]) Remote(ctx context.Context, c *Cluster, in I, opts ...TaskOption) *Stream[O] {
	if t == nil {
		return &Stream[O]{c: c, err: backend.Errorf(backend.InvalidArgument, "submit streaming task", "nil streaming task: create it with ray.NewStreamTask (at package level)")}
	}
	op := "submit streaming task " + t.name
	s := &Stream[O]{c: c, task: t.name, label: "task " + t.name}
	if err := c.checkCtx(ctx, op); err != nil {
		s.err = err
		return s
	}
	if err := optionsErr(op, opts); err != nil {
		s.err = err
		return s
	}
	spec := &backend.TaskSpec{
		Name:       t.name,
		Scheduling: backend.Scheduling{Resources: defaultTaskResources, Placement: backend.Placement{Bundle: -1}},
		MaxRetries: DefaultTaskRetries,
	}
	s.buffer = DefaultStreamBuffer
	for _, o := range opts {
		if b, ok := o.(StreamBuffer); ok {
			s.buffer = int(b)
		}
		if o != nil {
			o.applyTask(spec)
		}
	}
	v, err := encode(c.codec, in)
	if err != nil {
		s.err = backend.Errorf(backend.InvalidArgument, op, "input: %w", err)
		return s
	}
	src := &taskSource{c: c, task: t.name, input: v, sched: spec.Scheduling, retries: spec.MaxRetries, buffer: s.buffer}
	s.src = src
	s.err = src.start(ctx, 0)
	return s
}

// Stream is the caller's end of a running streaming task or method: its
// values in the order the code yielded them. A Stream is for one consumer;
// its methods are safe for concurrent use (Close may interrupt a Next) but
// deliver each value once.
type Stream[O any] struct {
	c      *Cluster
	task   string // the task or "class.method", for errors
	label  string // "task <name>" or "method <class>.<name>"
	buffer int
	src    streamSource

	closed atomic.Bool

	mu       sync.Mutex // held by Next while it waits
	received int        // values received, over all attempts
	pending  []O        // received, not yet consumed
	ended    bool       // the code returned; pending holds what is left
	err      error      // returned after pending, instead of io.EOF
	released bool
}

// streamSource is where a Stream's values come from: the internal actor
// running a streaming task, or a streaming method's call on its actor.
type streamSource interface {
	// pull returns the values yielded since the last pull (at least one,
	// or the end), received being how many the caller has in all.
	pull(ctx context.Context, received int) (streamBatch, error)
	// release stops the code if it still runs and frees what it holds.
	release()
}

// Next returns the next value, waiting for the code to yield it; io.EOF
// once it returned and every value was consumed, or its error (after every
// value it yielded before it). After Close it fails with
// FailedPrecondition.
func (s *Stream[O]) Next(ctx context.Context) (O, error) {
	var zero O
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed.Load() {
			return zero, backend.Errorf(backend.FailedPrecondition, "read stream of "+s.label, "the stream was closed")
		}
		if len(s.pending) > 0 {
			v := s.pending[0]
			s.pending[0] = zero
			s.pending = s.pending[1:]
			return v, nil
		}
		if s.ended || s.err != nil {
			s.releaseLocked()
			if s.err != nil {
				return zero, s.err
			}
			return zero, io.EOF
		}
		if err := s.pull(ctx); err != nil {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			if !s.closed.Load() {
				s.err = err
			}
		}
	}
}

// pull receives the next values. s.mu must be held.
func (s *Stream[O]) pull(ctx context.Context) error {
	b, err := s.src.pull(ctx, s.received)
	if err != nil {
		if ctx.Err() != nil || s.closed.Load() {
			return err
		}
		return taskStreamError(s.task, err)
	}
	for _, v := range b.native {
		o, _ := v.(O) // nil for a nil value
		s.pending = append(s.pending, o)
	}
	for _, data := range b.Items {
		v, err := decode[O](s.c.codec, backend.Value{Data: data})
		if err != nil {
			return backend.Errorf(backend.Internal, "read stream of "+s.label, "%w", err)
		}
		s.pending = append(s.pending, v)
	}
	s.received += len(b.Items) + len(b.native)
	s.ended = b.Done
	return nil
}

// releaseLocked releases the source once. s.mu must be held.
func (s *Stream[O]) releaseLocked() {
	if s.src != nil && !s.released {
		s.released = true
		s.src.release()
	}
}

// taskSource runs a streaming task's attempts in actors of the internal
// class ray.stream.
type taskSource struct {
	c       *Cluster
	task    string
	input   backend.Value
	sched   backend.Scheduling
	retries int
	buffer  int

	actor   atomic.Uint64 // the running attempt's actor; 0 when none
	stopped atomic.Bool
	attempt int // guarded by the Stream's mu
}

// start creates an attempt's actor, which runs the task from its value
// number skip on.
func (t *taskSource) start(ctx context.Context, skip int) error {
	st := streamStart{Task: t.task, Skip: skip, Buffer: t.buffer, Attempt: t.attempt}
	var arg backend.Value
	if t.c.codec == nil {
		st.native = t.input.Native
		arg = backend.Value{Native: st}
	} else {
		st.Input = t.input.Data
		data, err := t.c.codec.Marshal(st)
		if err != nil {
			return backend.Errorf(backend.Internal, "start streaming task "+t.task, "%w", err)
		}
		arg = backend.Value{Data: data}
	}
	id, err := t.c.b.CreateActor(ctx, &backend.ActorSpec{
		Class: streamClassName, Arg: backend.Arg{Value: arg}, Scheduling: t.sched, MaxConcurrency: 1,
	})
	if err != nil {
		return err
	}
	t.actor.Store(uint64(id))
	if t.stopped.Load() { // released meanwhile
		t.release()
	}
	return nil
}

func (t *taskSource) pull(ctx context.Context, received int) (streamBatch, error) {
	for {
		id, err := t.c.b.CallActor(ctx, &backend.CallSpec{Actor: backend.ActorID(t.actor.Load()), Class: streamClassName, Method: "next"})
		if err != nil {
			return streamBatch{}, err
		}
		b, err := newRef[streamBatch](t.c, id).Get(ctx)
		if err == nil || ctx.Err() != nil || t.stopped.Load() || !lost(err) || t.attempt >= t.retries {
			return b, err
		}
		// Lost with its node: a new attempt skips what the caller has.
		t.killActor()
		t.attempt++
		if err := t.start(ctx, received); err != nil {
			return streamBatch{}, err
		}
	}
}

func (t *taskSource) release() {
	t.stopped.Store(true)
	t.killActor()
}

func (t *taskSource) killActor() {
	if id := t.actor.Swap(0); id != 0 {
		t.c.b.KillActor(context.Background(), backend.ActorID(id)) //nolint:errcheck // a dead actor is fine
	}
}

// lost says whether a pull failed because the attempt was lost to a
// system failure (its node or worker died), which a retry may fix: not the
// task's own failure, nor an attempt that could not start.
func lost(err error) bool {
	return errors.Is(err, backend.ErrUnavailable)
}

// taskStreamError is the task's own error as the caller sees it: a
// TaskError names the streaming task, not the attempt's internal actor.
func taskStreamError(task string, err error) error {
	var be *backend.Error
	var te *backend.TaskError
	if errors.As(err, &be) && errors.As(err, &te) && te.Task != task {
		cp := *te
		cp.Task = task
		return &backend.Error{Code: be.Code, Op: be.Op, Err: &cp}
	}
	return err
}

// All returns an iterator over the stream's values: each value with a nil
// error, then, if the task failed, its error once. Leaving the loop early
// closes the stream (the task stops).
func (s *Stream[O]) All(ctx context.Context) iter.Seq2[O, error] {
	return func(yield func(O, error) bool) {
		defer s.Close()
		for {
			v, err := s.Next(ctx)
			if err == io.EOF {
				return
			}
			if !yield(v, err) || err != nil {
				return
			}
		}
	}
}

// Close stops the code if it still runs (its context ends, and its yield
// returns an error), frees its resources and drops the values not
// consumed. A Next waiting for a value returns. Close is idempotent.
func (s *Stream[O]) Close() {
	if s.closed.Swap(true) {
		return
	}
	if s.src != nil {
		s.src.release() // interrupts a pull in progress
	}
	s.mu.Lock()
	s.released = true
	s.pending = nil
	s.mu.Unlock()
}

// The streaming task's attempt runs in an actor of this internal class,
// registered here at package initialization like any other: its
// constructor starts the task's function, its method next hands the values
// yielded so far to the caller.

const streamClassName = "ray.stream"

// streamStart is the internal actor's constructor input.
type streamStart struct {
	Task    string `json:"task"`
	Skip    int    `json:"skip,omitempty"`
	Buffer  int    `json:"buffer"`
	Attempt int    `json:"attempt,omitempty"`
	Input   []byte `json:"input,omitempty"` // the task's input, encoded
	native  any    // the input, with values not encoded
}

// streamBatch is what next returns: values yielded since the previous
// call, and whether the task has returned (without error: an error is
// next's error, after every value).
type streamBatch struct {
	Items  [][]byte `json:"items,omitempty"`
	Done   bool     `json:"done,omitempty"`
	native []any
}

type streamActor struct {
	ch   chan backend.Value
	done chan struct{}
	err  error // set before done closes
}

func init() {
	registerClass(&classEntry{
		name:  streamClassName,
		actor: reflect.TypeFor[*streamActor](),
		in:    reflect.TypeFor[streamStart](),
		newFunc: func(ctx context.Context, c Codec, arg backend.Value) (any, error) {
			st, input, err := decodeStart(c, arg)
			if err != nil {
				return nil, err
			}
			e := lookupTask(st.Task)
			if e == nil || e.stream == nil {
				return nil, backend.Errorf(backend.NotFound, "run streaming task "+st.Task, "streaming task %q is not registered in this process", st.Task)
			}
			if info, ok := backend.RuntimeInfoFrom(ctx); ok {
				cp := *info
				cp.Task, cp.Attempt = st.Task, st.Attempt
				ctx = context.WithValue(ctx, backend.RuntimeInfoKey{}, &cp)
			}
			// ctx is the actor's life: killing it (Stream.Close, the end
			// of the stream) ends the function's context.
			a := &streamActor{ch: make(chan backend.Value, max(st.Buffer, 1)), done: make(chan struct{})}
			go a.run(ctx, c, e, st, input)
			return a, nil
		},
		methods: map[string]*methodEntry{"next": {
			name: "next", in: reflect.TypeFor[struct{}](), out: reflect.TypeFor[streamBatch](),
			call: func(ctx context.Context, c Codec, actor any, _ backend.Value) (backend.Value, error) {
				return actor.(*streamActor).next(ctx, c)
			},
		}},
	})
}

func decodeStart(c Codec, arg backend.Value) (streamStart, backend.Value, error) {
	if c == nil || (arg.Data == nil && arg.Native != nil) {
		st, ok := arg.Native.(streamStart)
		if !ok {
			return st, backend.Value{}, backend.Errorf(backend.Internal, "start streaming task", "constructor input is %T", arg.Native)
		}
		return st, backend.Value{Native: st.native}, nil
	}
	var st streamStart
	if err := c.Unmarshal(arg.Data, &st); err != nil {
		return st, backend.Value{}, backend.Errorf(backend.Internal, "start streaming task", "constructor input: %w", err)
	}
	return st, backend.Value{Data: st.Input}, nil
}

// run runs the task's function, dropping its first st.Skip values (the
// caller has them from an earlier attempt).
func (a *streamActor) run(ctx context.Context, c Codec, e *taskEntry, st streamStart, input backend.Value) {
	skip := st.Skip
	defer close(a.done)
	info, _ := backend.RuntimeInfoFrom(ctx)
	_, a.err = guard(info, func() (backend.Value, error) {
		err := e.stream(ctx, c, input, func(v backend.Value) error {
			if skip > 0 {
				skip--
				return nil
			}
			select {
			case a.ch <- v:
				return nil
			case <-ctx.Done():
				return backend.Errorf(backend.Canceled, "task "+st.Task, "the stream's caller has gone")
			}
		})
		if err != nil && !isInternal(err) {
			err = userError(info, err)
		}
		return backend.Value{}, err
	})
}

// next waits for at least one value, or the task's end, and returns what
// is there.
func (a *streamActor) next(ctx context.Context, c Codec) (backend.Value, error) {
	items, err := takeValues(ctx, a.ch, a.done)
	if err != nil {
		return backend.Value{}, err
	}
	if len(items) == 0 && a.err != nil { // done, and the channel is empty
		return backend.Value{}, a.err
	}
	return batchOf(c, items)
}

// takeValues waits for a value on ch, or for done, and returns it with the
// values that followed it, up to ch's capacity; none once done and ch
// empty.
func takeValues(ctx context.Context, ch chan backend.Value, done <-chan struct{}) ([]backend.Value, error) {
	var items []backend.Value
	select {
	case v := <-ch:
		items = append(items, v)
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(items) < cap(ch) {
		select {
		case v := <-ch:
			items = append(items, v)
		default:
			return items, nil
		}
	}
	return items, nil
}

// batchOf is what a next call returns for items: none means the end.
func batchOf(c Codec, items []backend.Value) (backend.Value, error) {
	b := streamBatch{Done: len(items) == 0}
	if c == nil {
		for _, v := range items {
			b.native = append(b.native, v.Native)
		}
		return backend.Value{Native: b}, nil
	}
	for _, v := range items {
		b.Items = append(b.Items, v.Data)
	}
	return encode(c, b)
}
