package fake

import (
	"context"
	"fmt"

	"github.com/goray-dev/goray/backend"
)

// script is what a test scripted for one name.
type script struct {
	failNext  []error
	err       error
	result    backend.Value
	hasResult bool
}

func (b *Backend) scriptLocked(name string) *script {
	if b.scripts == nil {
		b.scripts = map[string]*script{}
	}
	s := b.scripts[name]
	if s == nil {
		s = &script{}
		b.scripts[name] = s
	}
	return s
}

// SetResult makes every attempt of the task (or method, "class.method")
// name return v instead of running, until Reset. v is encoded with the
// fake's codec, and also carried unencoded for a cluster without a codec; a
// [backend.Value] is used as it is. SetResult replaces an earlier SetResult
// or SetError of name. It panics when the codec cannot encode v: that is a
// mistake in the test.
func (b *Backend) SetResult(name string, v any) {
	val, err := b.encode(v)
	if err != nil {
		panic(fmt.Sprintf("fake: SetResult(%q): %v", name, err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scriptLocked(name)
	s.result, s.hasResult, s.err = val, true, nil
}

// SetError makes every attempt of name (a task, "class.method", or an actor
// class for its constructor) fail with err, until Reset; a nil err removes
// the error. A goray error (such as backend.Errorf(backend.Unavailable,
// ...)) is returned as it is; any other error becomes a TaskFailed error
// with a *backend.TaskError, as if user code had returned it. SetError
// replaces an earlier SetResult or SetError of name.
func (b *Backend) SetError(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scriptLocked(name)
	s.err = err
	if err != nil {
		s.result, s.hasResult = backend.Value{}, false
	}
}

// FailNext makes the next n attempts of name fail with err (as SetError
// describes) before SetError, SetResult or the real function apply again.
// Failures queue up across calls of FailNext. With a retried task, the
// failures are consumed by the retries of one submission: FailNext(name, 2,
// an Unavailable error) lets a task with 2 or more retries succeed on its
// third attempt. FailNext panics on a nil err; n <= 0 does nothing.
func (b *Backend) FailNext(name string, n int, err error) {
	if err == nil {
		panic(fmt.Sprintf("fake: FailNext(%q): nil error", name))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scriptLocked(name)
	for range n {
		s.failNext = append(s.failNext, err)
	}
}

// Reactor decides the outcome of a call in place of the fake. It receives
// the call's record so far (without outcome) and returns handled = false to
// pass the call on to the next reactor, the scripts and finally the real
// code.
//
// For a task attempt or method call, a handling reactor stands in for the
// user code: err, if not nil, is the failure (as in [Backend.SetError]),
// else result is the output (as in [Backend.SetResult], but an encoding
// failure fails the call with InvalidArgument). For every other kind,
// including actor constructors, a reactor can only inject a failure: the
// call fails with err (a goray error as it is, any other error with code
// Unknown), and a handling reactor with a nil err lets the call proceed.
//
// Reactors run in the goroutine of the call, without the fake's lock: they
// may call the fake, and must be safe for concurrent use if the test
// submits work concurrently.
type Reactor func(call Call) (handled bool, result any, err error)

type reactorEntry struct {
	kind Kind
	name string
	fn   Reactor
}

// PrependReactor adds a reactor in front of the others for calls of kind
// (or [KindAny]) whose Name is name (or "*" for any name), as client-go's
// fake clientset does.
func (b *Backend) PrependReactor(kind Kind, name string, r Reactor) {
	if r == nil {
		panic("fake: PrependReactor: nil reactor")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reactors = append([]reactorEntry{{kind: kind, name: name, fn: r}}, b.reactors...)
}

// react runs the reactors for c. It reports the first handling reactor's
// result and error.
func (b *Backend) react(c Call) (handled bool, result any, err error) {
	b.mu.Lock()
	rs := b.reactors
	b.mu.Unlock()
	for _, r := range rs {
		if (r.kind != KindAny && r.kind != c.Kind) || (r.name != "*" && r.name != c.Name) {
			continue
		}
		if handled, result, err = r.fn(c); handled {
			return handled, result, err
		}
	}
	return false, nil, nil
}

// hook runs the reactors for a call that is not a task attempt or method
// call, and returns the failure a reactor injects, or nil.
func (b *Backend) hook(op string, c Call) error {
	handled, _, err := b.react(c)
	if !handled || err == nil {
		return nil
	}
	if isGorayError(err) || err == context.Canceled || err == context.DeadlineExceeded {
		return err // context errors are returned as they are
	}
	if code := backend.CodeOf(err); code != backend.Unknown {
		return &backend.Error{Code: code, Op: op, Err: err}
	}
	return backend.Wrap(backend.Unknown, op, err)
}

// standIn asks the reactors and scripts about one attempt of work. ok
// reports whether one of them decides the attempt's outcome; the real code
// runs otherwise.
func (b *Backend) standIn(c Call) (v backend.Value, err error, ok bool) {
	handled, result, rerr := b.react(c)
	if handled {
		if rerr != nil {
			return backend.Value{}, workError(c.Name, c.Attempt, rerr), true
		}
		v, err := b.encode(result)
		if err != nil {
			return backend.Value{}, backend.Errorf(backend.InvalidArgument, "fake reactor for "+c.Name, "result: %v", err), true
		}
		return v, nil, true
	}
	return b.nextScripted(c.Name, c.Attempt)
}

// nextScripted returns the scripted outcome of the next attempt of name,
// consuming a queued failure; ok is false when nothing is scripted.
func (b *Backend) nextScripted(name string, attempt int) (v backend.Value, err error, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.scripts[name]
	switch {
	case s == nil:
		return backend.Value{}, nil, false
	case len(s.failNext) > 0:
		err := s.failNext[0]
		s.failNext = s.failNext[1:]
		return backend.Value{}, workError(name, attempt, err), true
	case s.err != nil:
		return backend.Value{}, workError(name, attempt, s.err), true
	case s.hasResult:
		return s.result, nil, true
	}
	return backend.Value{}, nil, false
}

// workError turns a scripted failure of work into the error the work fails
// with: goray and context errors as they are, other errors carrying a goray
// code wrapped in an *Error of that code, and the rest a TaskFailed error,
// as ray's executor builds it for an error of user code.
func workError(name string, attempt int, err error) error {
	if isGorayError(err) || err == context.Canceled || err == context.DeadlineExceeded {
		return err
	}
	if code := backend.CodeOf(err); code != backend.Unknown {
		return &backend.Error{Code: code, Err: err}
	}
	return &backend.Error{Code: backend.TaskFailed, Err: &backend.TaskError{Task: name, Attempt: attempt, Message: err.Error()}}
}

func isGorayError(err error) bool {
	_, ok := err.(*backend.Error)
	return ok
}

// encode turns a scripted Go value into a backend value: encoded with the
// codec, and unencoded in Native for clusters without a codec (ray decodes
// Data when it has a codec, Native otherwise).
func (b *Backend) encode(v any) (backend.Value, error) {
	if val, ok := v.(backend.Value); ok {
		return val, nil
	}
	data, err := b.codec().Marshal(v)
	if err != nil {
		return backend.Value{}, fmt.Errorf("encode %T: %w", v, err)
	}
	return backend.Value{Data: data, Native: v}, nil
}
