package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/goray-dev/goray/tpu"
)

// Code classifies every error goray returns. The set is closed: backends map
// each failure to one of these codes, and [CodeOf] recovers it from any error.
type Code int

// The error codes. They follow gRPC's codes where the meaning matches.
const (
	// OK is the code of a nil error.
	OK Code = iota
	// Unknown is the code of an error that carries no code.
	Unknown
	// InvalidArgument means the request was malformed: an empty name, a
	// negative resource, a topology the generation does not have.
	InvalidArgument
	// NotFound means a task, actor, method, object or placement group name or
	// ID is not known.
	NotFound
	// AlreadyExists means a name that must be unique is taken.
	AlreadyExists
	// FailedPrecondition means the system is not in a state to serve the
	// request: the cluster is closed, a placement group was removed, a driver
	// and worker were built from different code.
	FailedPrecondition
	// ResourceExhausted means a bounded resource ran out (a message too large,
	// a queue full).
	ResourceExhausted
	// Infeasible means no node of the cluster could ever satisfy the request,
	// even if the cluster were idle. It is returned at once, never after a wait.
	Infeasible
	// Unavailable means the work was lost to a node, worker or host failure.
	// Such failures are retried per the task's retry options.
	Unavailable
	// DeadlineExceeded means a context deadline passed.
	DeadlineExceeded
	// Canceled means a context was canceled or the work was cancelled.
	Canceled
	// TaskFailed means user code returned an error or panicked.
	TaskFailed
	// ActorDied means the actor is dead: its constructor failed, it was
	// killed, or it ran out of restarts.
	ActorDied
	// Unimplemented means the backend lacks the capability.
	Unimplemented
	// Internal means a bug in goray or a backend.
	Internal
)

var codeNames = [...]string{
	OK:                 "OK",
	Unknown:            "Unknown",
	InvalidArgument:    "InvalidArgument",
	NotFound:           "NotFound",
	AlreadyExists:      "AlreadyExists",
	FailedPrecondition: "FailedPrecondition",
	ResourceExhausted:  "ResourceExhausted",
	Infeasible:         "Infeasible",
	Unavailable:        "Unavailable",
	DeadlineExceeded:   "DeadlineExceeded",
	Canceled:           "Canceled",
	TaskFailed:         "TaskFailed",
	ActorDied:          "ActorDied",
	Unimplemented:      "Unimplemented",
	Internal:           "Internal",
}

// String returns the code's name, such as "Infeasible".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Codes lists every code in the closed set, in order.
func Codes() []Code {
	out := make([]Code, 0, len(codeNames))
	for c := range codeNames {
		out = append(out, Code(c))
	}
	return out
}

// Sentinel errors, one per code, for use with errors.Is. Every *Error with a
// given code matches the sentinel of that code.
var (
	ErrInvalidArgument    = &Error{Code: InvalidArgument, sentinel: true}
	ErrNotFound           = &Error{Code: NotFound, sentinel: true}
	ErrAlreadyExists      = &Error{Code: AlreadyExists, sentinel: true}
	ErrFailedPrecondition = &Error{Code: FailedPrecondition, sentinel: true}
	ErrResourceExhausted  = &Error{Code: ResourceExhausted, sentinel: true}
	ErrInfeasible         = &Error{Code: Infeasible, sentinel: true}
	ErrUnavailable        = &Error{Code: Unavailable, sentinel: true}
	ErrTaskFailed         = &Error{Code: TaskFailed, sentinel: true}
	ErrActorDied          = &Error{Code: ActorDied, sentinel: true}
	ErrUnimplemented      = &Error{Code: Unimplemented, sentinel: true}
	ErrInternal           = &Error{Code: Internal, sentinel: true}
)

// Narrower sentinels. Errors that match these also match the sentinel of
// their code.
var (
	// ErrClosed is returned by every call on a closed cluster or backend
	// (code FailedPrecondition).
	ErrClosed = errors.New("cluster is closed")
	// ErrPlacementGroupRemoved is the error of work that was queued or
	// running in a placement group when it was removed (code
	// FailedPrecondition).
	ErrPlacementGroupRemoved = errors.New("placement group removed")
)

// Error is the error type of goray and its backends: a code, the operation
// that failed, and the cause.
//
// The zero value is not useful; build errors with [Errorf] or [Wrap].
type Error struct {
	// Code classifies the error.
	Code Code
	// Op names the operation, such as "submit task examples.square".
	Op string
	// Err is the cause; its message is the error's detail.
	Err error

	sentinel bool
}

// Errorf returns an *Error with the code, the operation and a message
// formatted as by fmt.Errorf (so %w wraps).
func Errorf(code Code, op, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Err: fmt.Errorf(format, args...)}
}

// Wrap returns an *Error with the code and operation around err. A context
// error is returned unchanged, as is nil.
func Wrap(code Code, op string, err error) error {
	if err == nil {
		return nil
	}
	if err == context.Canceled || err == context.DeadlineExceeded {
		return err
	}
	return &Error{Code: code, Op: op, Err: err}
}

func (e *Error) Error() string {
	if e.sentinel {
		return "goray: " + e.Code.String()
	}
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	switch {
	case e.Op != "" && msg != "":
		return e.Op + ": " + msg
	case e.Op != "":
		return e.Op + ": " + e.Code.String()
	case msg == "":
		return e.Code.String()
	default:
		return msg
	}
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Code == e.Code
}

// CodeOf returns the code of err: OK for nil, the code of the outermost
// *Error in the chain, Canceled and DeadlineExceeded for context errors,
// InvalidArgument for the errors of package tpu (an unknown generation, a
// topology the generation lacks, a bad pod type or argument), and Unknown
// otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case isTPUError(err):
		return InvalidArgument
	}
	return Unknown
}

// isTPUError reports whether err is one of package tpu's errors, all of
// which describe bad input.
func isTPUError(err error) bool {
	for _, s := range []error{tpu.ErrUnknownGeneration, tpu.ErrInvalidTopology, tpu.ErrInvalidChipsPerHost, tpu.ErrInvalidPodType, tpu.ErrInvalidArgument} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// TaskError is the error of a task or actor call whose user code returned an
// error or panicked. It crosses backends as data: the cause is kept as its
// message, so errors.Is against a user's own sentinel does not match after a
// remote hop (match on [ErrTaskFailed] and the message instead).
type TaskError struct {
	// Task is the registered name of the task, or "actor.method".
	Task string
	// Attempt is the 0-based attempt that failed.
	Attempt int
	// Message is the user error's message, or the panic value.
	Message string
	// Panicked is true when the user code panicked.
	Panicked bool
	// Stack is the goroutine stack at the panic; empty for returned errors.
	Stack string
	// Status is the HTTP status (400 to 599) the user error chose, 0 for
	// none: that of the first error in its chain with an HTTPStatus() int
	// method (serve's StatusError has one). It crosses processes as a
	// field, so a router answers with it without reading the message.
	Status int
}

func (e *TaskError) Error() string {
	kind := "failed"
	if e.Panicked {
		kind = "panicked"
	}
	return fmt.Sprintf("task %s %s (attempt %d): %s", e.Task, kind, e.Attempt, e.Message)
}

// Is matches ErrTaskFailed.
func (e *TaskError) Is(target error) bool { return target == ErrTaskFailed }

// HTTPStatus returns Status, so that a task returning (a wrap of) another
// task's error keeps the status it chose.
func (e *TaskError) HTTPStatus() int { return e.Status }

// Reop returns err under a new code and operation: the cause of an *Error is
// kept and its code and operation replaced, so an error from a helper such as
// [Resources.Validate] reads as the caller's ("submit task x: ...") rather
// than nesting two operations. Any other non-nil error becomes the cause; nil
// stays nil.
func Reop(code Code, op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Op: op, Err: Cause(err)}
}

// Cause returns the cause of an *Error (its Err field), or err itself when it
// is not an *Error.
func Cause(err error) error {
	if e, ok := err.(*Error); ok && !e.sentinel {
		return e.Err
	}
	return err
}
