package ray

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// StreamMethod is a registered streaming method of actor type A: it
// yields values that the caller consumes as they arrive, like Ray's
// generator actor methods. Create one with [NewStreamMethod] at package
// initialization.
type StreamMethod[A, I, O any] struct {
	class, name string
}

// streamNextMethod is the method every class with a streaming method gets,
// which hands a stream's values to its caller; it runs beside the actor's
// other calls (backend.CallSpec.Beside).
const streamNextMethod = "ray.stream.next"

// NewStreamMethod registers fn as streaming method name of class. Like a
// method, it runs in the actor as one call, taking one of the actor's
// MaxConcurrency slots until it returns (so with the default of 1 the
// actor's other calls wait for the stream to end, as in Ray); its values
// reach the caller while it runs. yield, backpressure ([StreamBuffer]),
// errors after values and the panic rules are as for [NewStreamTask]. If
// the actor restarts (MaxRestarts) and the call is retried
// (MaxTaskRetries), the retry's first values, as many as the caller has,
// are dropped, so the method must yield the same values again.
func NewStreamMethod[A, CI, I, O any](class *ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in I, yield func(O) error) error) *StreamMethod[A, I, O] {
	if fn == nil {
		panic(fmt.Sprintf("ray: NewStreamMethod %s.%s: nil function", class.name, name))
	}
	full := class.name + "." + name
	mustCross("NewStreamMethod "+full, "input", reflect.TypeFor[I]())
	mustCross("NewStreamMethod "+full, "output", reflect.TypeFor[O]())
	registerMethod(class.name, &methodEntry{
		name: name,
		in:   reflect.TypeFor[I](),
		out:  reflect.TypeFor[O](),
		call: func(ctx context.Context, c Codec, actor any, arg backend.Value) (backend.Value, error) {
			a, err := actorAs[A](actor, full)
			if err != nil {
				return backend.Value{}, err
			}
			sc, input, err := decodeStreamCall(c, arg)
			if err != nil {
				return backend.Value{}, err
			}
			in, err := decode[I](c, input)
			if err != nil {
				return backend.Value{}, backend.Errorf(backend.InvalidArgument, "call "+full, "input: %w", err)
			}
			ms := methodStreams.get(sc.ID, sc.Buffer)
			err = fn(ctx, a, in, func(o O) error {
				v, err := encode(c, o)
				if err != nil {
					return backend.Errorf(backend.InvalidArgument, "call "+full, "output: %w", err)
				}
				select {
				case ms.ch <- v:
					return nil
				case <-ctx.Done():
					return backend.Errorf(backend.Canceled, "call "+full, "the stream's caller has gone")
				case <-ms.stop:
					return backend.Errorf(backend.Canceled, "call "+full, "the stream was closed")
				}
			})
			ms.finish(err)
			if ctx.Err() != nil {
				methodStreams.drop(sc.ID, false) // closed by the caller, who reads no more
			}
			return backend.Value{}, err
		},
	})
	registry.Lock()
	if registry.classes[class.name].methods[streamNextMethod] == nil {
		registry.classes[class.name].methods[streamNextMethod] = &methodEntry{
			name: streamNextMethod, in: reflect.TypeFor[streamPull](), out: reflect.TypeFor[streamBatch](),
			call: func(ctx context.Context, c Codec, _ any, arg backend.Value) (backend.Value, error) {
				p, err := decode[streamPull](c, arg)
				if err != nil {
					return backend.Value{}, backend.Errorf(backend.Internal, "read stream", "%w", err)
				}
				return methodStreams.next(ctx, c, p)
			},
		}
	}
	registry.Unlock()
	return &StreamMethod[A, I, O]{class: class.name, name: name}
}

// Name returns "class.method".
func (m *StreamMethod[A, I, O]) Name() string { return m.class + "." + m.name }

// Remote calls the method on h's actor with input in and returns its
// stream of values. Options: [StreamBuffer]. Read it with [Stream.Next]
// or [Stream.All]; a stream not read to its end must be closed (All does
// it), which cancels the call.
func (m *StreamMethod[A, I, O]) Remote(ctx context.Context, h *ActorHandle[A], in I, opts ...TaskOption) *Stream[O] {
	full := m.class + "." + m.name
	s := &Stream[O]{c: h.c, task: full, label: "method " + full, buffer: DefaultStreamBuffer}
	op := "call streaming method " + full
	if err := h.Err(); err != nil {
		s.err = err
		return s
	}
	if err := h.c.checkCtx(ctx, op); err != nil {
		s.err = err
		return s
	}
	if err := optionsErr(op, opts); err != nil {
		s.err = err
		return s
	}
	for _, o := range opts {
		if b, ok := o.(StreamBuffer); ok {
			s.buffer = int(b)
		}
	}
	v, err := encode(h.c.codec, in)
	if err != nil {
		s.err = backend.Errorf(backend.InvalidArgument, op, "input: %w", err)
		return s
	}
	var idb [8]byte
	rand.Read(idb[:]) //nolint:errcheck // crypto/rand never fails
	src := &methodSource{c: h.c, actor: h.id, class: h.class, id: binary.LittleEndian.Uint64(idb[:]), buffer: s.buffer}
	sc := streamCall{ID: src.id, Buffer: s.buffer}
	var arg backend.Value
	if h.c.codec == nil {
		sc.native = v.Native
		arg = backend.Value{Native: sc}
	} else {
		sc.Input = v.Data
		data, err := h.c.codec.Marshal(sc)
		if err != nil {
			s.err = backend.Errorf(backend.Internal, op, "%w", err)
			return s
		}
		arg = backend.Value{Data: data}
	}
	// The call is made in the background: a backend that runs calls in
	// the caller's goroutine (backend/fake) returns from CallActor only
	// when the method has ended, and the method needs its caller reading.
	spec := &backend.CallSpec{Actor: h.id, Class: h.class, Method: m.name, Arg: backend.Arg{Value: arg}}
	src.called = make(chan struct{})
	go func() {
		defer close(src.called)
		src.call, src.callErr = h.c.b.CallActor(context.WithoutCancel(ctx), spec)
	}()
	s.src = src
	return s
}

// streamCall is a streaming method call's input.
type streamCall struct {
	ID     uint64 `json:"id"`
	Buffer int    `json:"buffer"`
	Input  []byte `json:"input,omitempty"` // the method's input, encoded
	native any
}

func decodeStreamCall(c Codec, arg backend.Value) (streamCall, backend.Value, error) {
	if c == nil || (arg.Data == nil && arg.Native != nil) {
		sc, ok := arg.Native.(streamCall)
		if !ok {
			return sc, backend.Value{}, backend.Errorf(backend.Internal, "call streaming method", "input is %T", arg.Native)
		}
		return sc, backend.Value{Native: sc.native}, nil
	}
	var sc streamCall
	if err := c.Unmarshal(arg.Data, &sc); err != nil {
		return sc, backend.Value{}, backend.Errorf(backend.Internal, "call streaming method", "input: %w", err)
	}
	return sc, backend.Value{Data: sc.Input}, nil
}

// streamPull is the input of the next method: the stream, how many values
// the caller has received (a retried method's first values up to that
// count are dropped), or Drop to forget the stream.
type streamPull struct {
	ID       uint64 `json:"id"`
	Received int    `json:"received"`
	Buffer   int    `json:"buffer"`
	Drop     bool   `json:"drop,omitempty"`
}

// methodStreams are this process's streams of streaming method calls, by
// ID; the call and the next calls meet here, whichever comes first.
var methodStreams = &streamTable{m: map[uint64]*methodStream{}}

type streamTable struct {
	mu sync.Mutex
	m  map[uint64]*methodStream
	// closed remembers, for a while, the streams closed before their
	// method ran (a backend without cancellation may still run it).
	closed map[uint64]time.Time
}

type methodStream struct {
	ch        chan backend.Value
	done      chan struct{}
	doneOnce  sync.Once
	err       error         // set before done closes
	stop      chan struct{} // closed when the caller closed the stream
	stopOnce  sync.Once
	delivered atomic.Int64
}

// closedMemory is how long a stream closed before its method ran is
// remembered.
const closedMemory = 10 * time.Minute

func (t *streamTable) get(id uint64, buffer int) *methodStream {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := t.m[id]
	if ms == nil {
		ms = &methodStream{ch: make(chan backend.Value, max(buffer, 1)), done: make(chan struct{}), stop: make(chan struct{})}
		if _, closed := t.closed[id]; closed {
			delete(t.closed, id)
			close(ms.stop)
			return ms // not kept: nobody reads it
		}
		t.m[id] = ms
	}
	return ms
}

// drop forgets a stream; with closed (the caller closed it), a method
// still yielding to it stops, and one that has not started yet stops at
// its first value.
func (t *streamTable) drop(id uint64, closed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := t.m[id]
	delete(t.m, id)
	if !closed {
		return
	}
	if ms != nil {
		ms.stopOnce.Do(func() { close(ms.stop) })
		return
	}
	now := time.Now()
	if t.closed == nil {
		t.closed = map[uint64]time.Time{}
	}
	for k, at := range t.closed {
		if now.Sub(at) > closedMemory {
			delete(t.closed, k)
		}
	}
	t.closed[id] = now
}

func (ms *methodStream) finish(err error) {
	ms.doneOnce.Do(func() {
		ms.err = err
		close(ms.done)
	})
}

// next hands out the values of stream p.ID yielded so far (waiting for at
// least one, or the end), after dropping those a retried call yields again.
func (t *streamTable) next(ctx context.Context, c Codec, p streamPull) (backend.Value, error) {
	if p.Drop {
		t.drop(p.ID, true)
		return encode(c, streamBatch{Done: true})
	}
	ms := t.get(p.ID, p.Buffer)
	for ms.delivered.Load() < int64(p.Received) { // the caller has these from an earlier attempt
		select {
		case <-ms.ch:
			ms.delivered.Add(1)
		case <-ms.done:
			if len(ms.ch) == 0 {
				t.drop(p.ID, false)
				return backend.Value{}, ms.err
			}
		case <-ctx.Done():
			return backend.Value{}, ctx.Err()
		}
	}
	items, err := takeValues(ctx, ms.ch, ms.done)
	if err != nil {
		return backend.Value{}, err
	}
	ms.delivered.Add(int64(len(items)))
	if len(items) == 0 { // done and drained
		t.drop(p.ID, false)
		if ms.err != nil {
			return backend.Value{}, ms.err
		}
	}
	return batchOf(c, items)
}

// methodSource reads a streaming method's values with next calls beside
// the actor's other calls.
type methodSource struct {
	c      *Cluster
	actor  backend.ActorID
	class  string
	id     uint64
	buffer int
	// call is the method call, whose result ends with it, and callErr
	// the error submitting it; both are set when called closes.
	call    backend.ObjectID
	callErr error
	called  chan struct{}

	mu      sync.Mutex
	pulling backend.ObjectID // the next call in flight, for release
	stopped bool
}

func (m *methodSource) pull(ctx context.Context, received int) (streamBatch, error) {
	select {
	case <-m.called:
		if m.callErr != nil {
			return streamBatch{}, m.callErr
		}
	default: // still being submitted, or running in a synchronous backend
	}
	p := streamPull{ID: m.id, Received: received, Buffer: m.buffer}
	v, err := encode(m.c.codec, p)
	if err != nil {
		return streamBatch{}, err
	}
	id, err := m.c.b.CallActor(ctx, &backend.CallSpec{Actor: m.actor, Class: m.class, Method: streamNextMethod, Arg: backend.Arg{Value: v}, Beside: true})
	if err != nil {
		return streamBatch{}, err
	}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		m.cancel(id)
		return streamBatch{}, backend.Errorf(backend.Canceled, "read stream", "the stream was closed")
	}
	m.pulling = id
	m.mu.Unlock()
	b, err := newRef[streamBatch](m.c, id).Get(ctx)
	m.mu.Lock()
	m.pulling = 0
	m.mu.Unlock()
	return b, err
}

// release cancels the method call (its context ends, its yield fails) and
// a next call in flight, frees the call's result and forgets the stream in
// the actor's process.
func (m *methodSource) release() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	pulling := m.pulling
	m.mu.Unlock()
	if pulling != 0 {
		m.cancel(pulling)
	}
	go func() { // once submitted (in a synchronous backend, once ended)
		<-m.called
		if m.callErr == nil {
			m.cancel(m.call)
			m.c.b.Free(m.call)
		}
	}()
	if v, err := encode(m.c.codec, streamPull{ID: m.id, Drop: true}); err == nil {
		if id, err := m.c.b.CallActor(context.Background(), &backend.CallSpec{Actor: m.actor, Class: m.class, Method: streamNextMethod, Arg: backend.Arg{Value: v}, Beside: true}); err == nil {
			m.c.b.Free(id)
		}
	}
}

func (m *methodSource) cancel(id backend.ObjectID) {
	if tc, ok := m.c.b.(backend.TaskCanceler); ok {
		tc.CancelTask(context.Background(), id, backend.CancelOptions{}) //nolint:errcheck // finished work is not affected
	}
}
