package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goray-dev/goray/ray"
)

// Streams cross the actor-call boundary, which returns one value per call,
// as a long-poll protocol of three methods registered on the actor's class:
//
//	<name>.start  {ID, In}  runs the user's function for the whole stream;
//	                        each send appends a chunk to a buffer keyed by ID
//	<name>.next   {ID}      waits until the buffer holds chunks (or the
//	                        stream ended) and returns all of them at once
//	<name>.cancel ID        cancels the stream's function
//
// The router picks the ID, submits start without waiting for it, then calls
// next until a reply says Done. Because next returns every buffered chunk,
// a fast producer costs one round trip per batch rather than per token; a
// slow consumer makes send block once streamBuffer chunks wait (backpressure).
// The buffer lives in the process that runs the actor, so the protocol works
// unchanged when actors run in worker processes. Start owns the buffer's
// lifetime: it deletes the entry when the stream is drained, cancelled,
// abandoned for streamIdle, or its actor dies.

const (
	// streamBuffer is how many chunks wait before send blocks.
	streamBuffer = 256
	// streamPoll bounds one next call's wait, so a router never waits on a
	// call for a stream that never started.
	streamPoll = 2 * time.Second
	// streamIdle is how long a stream waits for its consumer before it is
	// abandoned.
	streamIdle = 30 * time.Second
)

// errStreamAbandoned is returned by send when no consumer asked for chunks
// for streamIdle.
var errStreamAbandoned = errors.New("serve: stream abandoned by its consumer")

// Stream is a streaming method of actor type A: from one input I it sends
// any number of chunks O, which the ingress forwards as server-sent events.
// Register it at package level with [NewStream], next to the class's other
// methods, so that worker processes register it too.
//
// A *Stream is immutable and safe for concurrent use.
type Stream[A, I, O any] struct {
	name   string
	start  *ray.Method[A, streamStart[I], struct{}]
	next   *ray.Method[A, string, streamBatch[O]]
	cancel *ray.Method[A, string, struct{}]
}

// NewStream registers a streaming method name on class: fn receives the
// input and a send function, and returns when the stream is complete.
// send blocks while the consumer lags (backpressure) and returns an error
// once the stream was cancelled or abandoned; fn should then return.
// It panics, as ray.NewMethod does, on an empty or duplicate name.
func NewStream[A, CI, I, O any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in I, send func(O) error) error) *Stream[A, I, O] {
	if fn == nil {
		panic("serve: NewStream " + class.Name() + "." + name + ": nil function")
	}
	s := &Stream[A, I, O]{name: class.Name() + "." + name}
	s.start = ray.NewMethod(class, name+".start", func(ctx context.Context, a A, in streamStart[I]) (struct{}, error) {
		return struct{}{}, runStream(ctx, in.ID, func(ctx context.Context, e *streamEntry) error {
			return fn(ctx, a, in.In, func(o O) error { return e.send(ctx, o) })
		})
	})
	s.next = ray.NewMethod(class, name+".next", func(ctx context.Context, _ A, id string) (streamBatch[O], error) {
		chunks, done, errMsg := nextChunks(ctx, id, streamPoll)
		b := streamBatch[O]{Done: done, Err: errMsg, Chunks: make([]O, len(chunks))}
		for i, c := range chunks {
			b.Chunks[i] = c.(O)
		}
		return b, nil
	})
	s.cancel = ray.NewMethod(class, name+".cancel", func(ctx context.Context, _ A, id string) (struct{}, error) {
		cancelStream(id)
		return struct{}{}, nil
	})
	return s
}

// Name returns "class.name".
func (s *Stream[A, I, O]) Name() string { return s.name }

type streamStart[I any] struct {
	ID string
	In I
}

type streamBatch[O any] struct {
	Chunks []O
	Done   bool
	Err    string `json:",omitempty"`
}

// streamEntry is one stream's buffer in the actor's process.
type streamEntry struct {
	mu       sync.Mutex
	buf      []any
	attached bool // start has claimed the entry
	done     bool
	errMsg   string
	changed  chan struct{} // closed and replaced on every change
	cancel   context.CancelFunc
	endSeen  bool // the consumer has taken the last chunk and Done
}

var streams sync.Map // id -> *streamEntry

func newStreamID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func entryFor(id string) *streamEntry {
	e, _ := streams.LoadOrStore(id, &streamEntry{changed: make(chan struct{})})
	return e.(*streamEntry)
}

// notify wakes waiters. e.mu must be held.
func (e *streamEntry) notify() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// send appends a chunk, waiting while the buffer is full.
func (e *streamEntry) send(ctx context.Context, chunk any) error {
	idle := time.NewTimer(streamIdle)
	defer idle.Stop()
	for {
		e.mu.Lock()
		if len(e.buf) < streamBuffer {
			e.buf = append(e.buf, chunk)
			e.notify()
			e.mu.Unlock()
			return nil
		}
		ch := e.changed
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-idle.C:
			return errStreamAbandoned
		}
	}
}

// runStream runs produce for stream id and keeps the entry until the
// consumer has drained it (or gave up), then deletes it.
func runStream(ctx context.Context, id string, produce func(context.Context, *streamEntry) error) error {
	e := entryFor(id)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.mu.Lock()
	if e.attached {
		e.mu.Unlock()
		return fmt.Errorf("serve: stream %s started twice", id)
	}
	e.attached, e.cancel = true, cancel
	e.mu.Unlock()
	defer streams.CompareAndDelete(id, e)

	err := produce(ctx, e)
	e.mu.Lock()
	e.done = true
	if err != nil {
		e.errMsg = err.Error()
	}
	e.notify()
	e.mu.Unlock()

	// Wait for the consumer to drain the buffer and see Done.
	idle := time.NewTimer(streamIdle)
	defer idle.Stop()
	for {
		e.mu.Lock()
		drained := e.endSeen
		ch := e.changed
		e.mu.Unlock()
		if drained {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return err
		case <-idle.C:
			return err
		}
	}
}

// nextChunks waits up to wait for chunks of stream id and takes them all.
// done reports the end of the stream, with errMsg its error if any.
func nextChunks(ctx context.Context, id string, wait time.Duration) (chunks []any, done bool, errMsg string) {
	e := entryFor(id)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		e.mu.Lock()
		if len(e.buf) > 0 || e.done {
			chunks, e.buf = e.buf, nil
			done, errMsg = e.done, e.errMsg
			e.endSeen = done
			e.notify()
			e.mu.Unlock()
			return chunks, done, errMsg
		}
		ch, attached := e.changed, e.attached
		e.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-ctx.Done():
		case <-t.C:
		}
		if !attached {
			// Nobody produces into this entry yet: do not keep it.
			e.mu.Lock()
			if !e.attached {
				streams.CompareAndDelete(id, e)
			}
			e.mu.Unlock()
		}
		return nil, false, ""
	}
}

// cancelStream stops stream id's function, if it runs here.
func cancelStream(id string) {
	v, ok := streams.Load(id)
	if !ok {
		return
	}
	e := v.(*streamEntry)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		e.cancel()
	}
	e.done = true
	e.buf = nil
	e.endSeen = true
	e.notify()
}
