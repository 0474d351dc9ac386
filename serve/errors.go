package serve

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// StatusError is an error a replica's method returns to choose the HTTP
// status its request is answered with (Ray Serve's HTTPException): build it
// with [Error] or [CodeError]. The client gets the status and
// {"error": message}; a 429 or 503 carries Retry-After. A handle call gets
// a [*CallError] with the same Code. The status crosses from the replica
// to the router as a field of the task's error (ray.TaskError's Status,
// from HTTPStatus) on every backend, so it still counts when the method
// wraps it (fmt.Errorf("...: %w", err)); a message's text never sets it.
//
// A StatusError has the goray code of its status (see [StatusOf]), or the
// one given to CodeError, for ray.CodeOf and errors.Is.
type StatusError struct {
	// Status is the HTTP status, 400 to 599.
	Status int
	// Message is what the client is told.
	Message string

	code ray.ErrorCode
}

// Error returns an error that answers its request with status (400 to 599;
// anything else is 500) and {"error": msg}.
func Error(status int, msg string) error {
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	return &StatusError{Status: status, Message: msg, code: codeOfStatus(status)}
}

// CodeError returns an error of the goray code, answering its request with
// the status StatusOf gives the code.
func CodeError(code ray.ErrorCode, msg string) error {
	return &StatusError{Status: StatusOf(code), Message: msg, code: code}
}

func (e *StatusError) Error() string { return e.Message }

// HTTPStatus returns Status: ray records it in the task's error
// (ray.TaskError's Status) when a method returns e, wrapped or not.
func (e *StatusError) HTTPStatus() int { return e.Status }

// Unwrap returns the error's goray code, for ray.CodeOf and errors.Is.
func (e *StatusError) Unwrap() error { return &backend.Error{Code: e.code, Err: errors.New(e.Message)} }

// StatusOf is the HTTP status the ingress answers an error of the goray
// code with: InvalidArgument 400, NotFound 404, AlreadyExists 409,
// FailedPrecondition 412, ResourceExhausted 429, Unimplemented 501,
// Unavailable 503, DeadlineExceeded 504, Canceled 499 (the client went
// away), every other code 500.
func StatusOf(code ray.ErrorCode) int {
	switch code {
	case ray.InvalidArgument:
		return http.StatusBadRequest
	case ray.NotFound:
		return http.StatusNotFound
	case ray.AlreadyExists:
		return http.StatusConflict
	case ray.FailedPrecondition:
		return http.StatusPreconditionFailed
	case ray.ResourceExhausted:
		return http.StatusTooManyRequests
	case ray.Unimplemented:
		return http.StatusNotImplemented
	case ray.Unavailable:
		return http.StatusServiceUnavailable
	case ray.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case ray.Canceled:
		return 499
	}
	return http.StatusInternalServerError
}

// codeOfStatus is the goray code of an HTTP error status.
func codeOfStatus(status int) ray.ErrorCode {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusRequestTimeout, http.StatusMethodNotAllowed:
		return ray.InvalidArgument
	case http.StatusNotFound:
		return ray.NotFound
	case http.StatusConflict:
		return ray.AlreadyExists
	case http.StatusPreconditionFailed:
		return ray.FailedPrecondition
	case http.StatusTooManyRequests:
		return ray.ResourceExhausted
	case http.StatusNotImplemented:
		return ray.Unimplemented
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return ray.Unavailable
	case http.StatusGatewayTimeout:
		return ray.DeadlineExceeded
	case 499:
		return ray.Canceled
	}
	if status >= 400 && status < 500 {
		return ray.InvalidArgument
	}
	return ray.Internal
}

// codeErr returns an error of the goray code whose text is format's (%w
// wraps as fmt.Errorf does).
func codeErr(code ray.ErrorCode, format string, args ...any) error {
	return &backend.Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// methodError is how the ingress answers a method's error err (a
// TaskFailed ray error): the status the method chose, or 500; and the
// method's own message, without the call's wrapping (which names the
// actor), or for a panic the panic's value only.
func methodError(err error) (int, string) {
	msg := err.Error()
	if te, ok := errors.AsType[*ray.TaskError](err); ok {
		msg = te.Message
		if te.Panicked {
			return http.StatusInternalServerError, fmt.Sprintf("the method panicked: %s", te.Message)
		}
		if te.Status >= 400 && te.Status <= 599 {
			return te.Status, msg
		}
	}
	return http.StatusInternalServerError, msg
}
