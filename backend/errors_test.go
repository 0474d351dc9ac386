package backend_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// tpuErr returns the error of a call into package tpu, which must fail.
func tpuErr[T any](_ T, err error) error {
	if err == nil {
		panic("want an error from package tpu")
	}
	return err
}

// sentinels maps every code that has a sentinel to it.
var sentinels = map[backend.Code]error{
	backend.InvalidArgument:    backend.ErrInvalidArgument,
	backend.NotFound:           backend.ErrNotFound,
	backend.AlreadyExists:      backend.ErrAlreadyExists,
	backend.FailedPrecondition: backend.ErrFailedPrecondition,
	backend.ResourceExhausted:  backend.ErrResourceExhausted,
	backend.Infeasible:         backend.ErrInfeasible,
	backend.Unavailable:        backend.ErrUnavailable,
	backend.TaskFailed:         backend.ErrTaskFailed,
	backend.ActorDied:          backend.ErrActorDied,
	backend.Unimplemented:      backend.ErrUnimplemented,
	backend.Internal:           backend.ErrInternal,
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want backend.Code
	}{
		{"nil", nil, backend.OK},
		{"context.Canceled", context.Canceled, backend.Canceled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, backend.DeadlineExceeded},
		{"wrapped context.Canceled", fmt.Errorf("get obj-1: %w", context.Canceled), backend.Canceled},
		{"wrapped context.DeadlineExceeded", fmt.Errorf("wait: %w", context.DeadlineExceeded), backend.DeadlineExceeded},
		{"*Error", backend.Errorf(backend.NotFound, "op", "missing"), backend.NotFound},
		{"wrapped *Error", fmt.Errorf("outer: %w", backend.Errorf(backend.Infeasible, "op", "too big")), backend.Infeasible},
		{"joined with *Error", errors.Join(io.EOF, backend.Errorf(backend.Unavailable, "op", "node died")), backend.Unavailable},
		{"outermost *Error wins", backend.Errorf(backend.Unavailable, "outer", "%w", backend.Errorf(backend.NotFound, "inner", "x")), backend.Unavailable},
		{"*Error around a context error", backend.Errorf(backend.Internal, "op", "%w", context.Canceled), backend.Internal},
		{"sentinel", backend.ErrActorDied, backend.ActorDied},
		{"plain error", errors.New("boom"), backend.Unknown},
		{"io.EOF", io.EOF, backend.Unknown},
		{"tpu unknown generation", tpuErr(tpu.ParseGeneration("v9")), backend.InvalidArgument},
		{"tpu topology", tpuErr(tpu.NewSliceShape(tpu.V6e, "4x5", 0)), backend.InvalidArgument},
		{"tpu chips per host", tpuErr(tpu.NewSliceShape(tpu.V6e, "4x4", 3)), backend.InvalidArgument},
		{"tpu pod type", func() error { _, _, err := tpu.ParsePodType("v6e"); return err }(), backend.InvalidArgument},
		{"tpu argument", tpuErr(tpu.MultisliceEnv("", 0, 2, 5)), backend.InvalidArgument},
		{"wrapped tpu error", fmt.Errorf("load: %w", tpu.ErrInvalidTopology), backend.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.CodeOf(tt.err), tt.want)
		})
	}
}

func TestErrorsIsSentinels(t *testing.T) {
	for code, sentinel := range sentinels {
		t.Run(code.String(), func(t *testing.T) {
			is := is.New(t)
			err := backend.Errorf(code, "op", "detail")
			is.True(errors.Is(err, sentinel))                            // an *Error matches its code's sentinel
			is.True(errors.Is(fmt.Errorf("wrapped: %w", err), sentinel)) // through wrapping too
			is.True(errors.Is(sentinel, sentinel))
			is.Equal(backend.CodeOf(sentinel), code)
			for other, otherSentinel := range sentinels {
				if other != code {
					is.True(!errors.Is(err, otherSentinel)) // never another code's sentinel
				}
			}
			is.True(!errors.Is(errors.New("detail"), sentinel))
			is.Equal(sentinel.Error(), "goray: "+code.String())
		})
	}
}

func TestEverySentinelCodeIsCovered(t *testing.T) {
	is := is.New(t)
	// Every code except the ones without a failure of their own has a sentinel.
	noSentinel := map[backend.Code]bool{backend.OK: true, backend.Unknown: true, backend.Canceled: true, backend.DeadlineExceeded: true}
	for _, c := range backend.Codes() {
		_, ok := sentinels[c]
		is.Equal(ok, !noSentinel[c]) // code c has a sentinel iff it is a failure code
	}
}

func TestErrorfWrapChains(t *testing.T) {
	t.Run("%w keeps the cause", func(t *testing.T) {
		is := is.New(t)
		err := backend.Errorf(backend.InvalidArgument, "decode input", "read: %w", io.ErrUnexpectedEOF)
		is.True(errors.Is(err, io.ErrUnexpectedEOF))
		is.True(errors.Is(err, backend.ErrInvalidArgument))
		is.Equal(err.Error(), "decode input: read: unexpected EOF")
		is.Equal(errors.Unwrap(errors.Unwrap(err)), io.ErrUnexpectedEOF)
	})
	t.Run("%v drops the cause", func(t *testing.T) {
		is := is.New(t)
		err := backend.Errorf(backend.InvalidArgument, "op", "read: %v", io.ErrUnexpectedEOF)
		is.True(!errors.Is(err, io.ErrUnexpectedEOF))
		is.True(errors.Is(err, backend.ErrInvalidArgument))
	})
	t.Run("ErrClosed matches its code too", func(t *testing.T) {
		is := is.New(t)
		err := backend.Errorf(backend.FailedPrecondition, "get object", "%w", backend.ErrClosed)
		is.True(errors.Is(err, backend.ErrClosed))
		is.True(errors.Is(err, backend.ErrFailedPrecondition))
		is.Equal(err.Error(), "get object: cluster is closed")
	})
	t.Run("ErrPlacementGroupRemoved matches its code too", func(t *testing.T) {
		is := is.New(t)
		err := fmt.Errorf("get: %w", backend.Errorf(backend.FailedPrecondition, "task x", "%w", backend.ErrPlacementGroupRemoved))
		is.True(errors.Is(err, backend.ErrPlacementGroupRemoved))
		is.True(errors.Is(err, backend.ErrFailedPrecondition))
		is.True(!errors.Is(err, backend.ErrClosed))
	})
	t.Run("nested *Error matches both codes", func(t *testing.T) {
		is := is.New(t)
		err := backend.Errorf(backend.Unavailable, "outer", "%w", backend.Errorf(backend.NotFound, "inner", "gone"))
		is.True(errors.Is(err, backend.ErrUnavailable))
		is.True(errors.Is(err, backend.ErrNotFound))
		is.Equal(err.Error(), "outer: inner: gone")
	})
	t.Run("errors.As reads code and op", func(t *testing.T) {
		is := is.New(t)
		var e *backend.Error
		is.True(errors.As(fmt.Errorf("ctx: %w", backend.Errorf(backend.Infeasible, "submit task x", "no GPU")), &e))
		is.Equal(e.Code, backend.Infeasible)
		is.Equal(e.Op, "submit task x")
	})
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *backend.Error
		want string
	}{
		{"op and cause", &backend.Error{Code: backend.NotFound, Op: "get actor", Err: errors.New("no actor \"a\"")}, `get actor: no actor "a"`},
		{"op only", &backend.Error{Code: backend.Internal, Op: "schedule"}, "schedule: Internal"},
		{"cause only", &backend.Error{Code: backend.Internal, Err: errors.New("bad state")}, "bad state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tt.err.Error(), tt.want)
		})
	}
}

func TestErrorMessageNeverEmpty(t *testing.T) {
	for _, err := range []*backend.Error{
		{Code: backend.Internal},
		backend.Errorf(backend.NotFound, "", ""),
	} {
		t.Run(err.Code.String(), func(t *testing.T) {
			is := is.New(t)
			is.Equal(err.Error(), err.Code.String())
		})
	}
}

func TestWrap(t *testing.T) {
	cause := errors.New("connection reset")
	wrappedCtx := fmt.Errorf("dial: %w", context.DeadlineExceeded)
	tests := []struct {
		name     string
		err      error
		wantSame bool // returned as is
		wantCode backend.Code
	}{
		{"nil", nil, true, backend.OK},
		{"context.Canceled", context.Canceled, true, backend.Canceled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, true, backend.DeadlineExceeded},
		{"plain error", cause, false, backend.Unavailable},
		{"wrapped context error", wrappedCtx, false, backend.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got := backend.Wrap(backend.Unavailable, "get obj-7", tt.err)
			if tt.wantSame {
				is.Equal(got, tt.err) // returned unchanged
			} else {
				var e *backend.Error
				is.True(errors.As(got, &e))
				is.Equal(e.Op, "get obj-7")
				is.Equal(e.Unwrap(), tt.err)
				is.True(errors.Is(got, tt.err))
				is.Equal(got.Error(), "get obj-7: "+tt.err.Error())
			}
			is.Equal(backend.CodeOf(got), tt.wantCode)
		})
	}
}

func TestCodeString(t *testing.T) {
	want := []string{"OK", "Unknown", "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
		"ResourceExhausted", "Infeasible", "Unavailable", "DeadlineExceeded", "Canceled", "TaskFailed",
		"ActorDied", "Unimplemented", "Internal"}
	t.Run("every code", func(t *testing.T) {
		is := is.New(t)
		codes := backend.Codes()
		is.Equal(len(codes), len(want))
		for i, c := range codes {
			is.Equal(int(c), i) // Codes lists the codes in order
			is.Equal(c.String(), want[i])
		}
	})
	t.Run("named constants", func(t *testing.T) {
		is := is.New(t)
		is.Equal(backend.Infeasible.String(), "Infeasible")
		is.Equal(backend.Internal.String(), "Internal")
		is.Equal(backend.OK.String(), "OK")
	})
	for _, c := range []backend.Code{-1, backend.Code(len(want)), 99} {
		t.Run(fmt.Sprintf("out of range %d", int(c)), func(t *testing.T) {
			is := is.New(t)
			is.Equal(c.String(), fmt.Sprintf("Code(%d)", int(c)))
		})
	}
}

func TestTaskError(t *testing.T) {
	tests := []struct {
		name string
		err  *backend.TaskError
		want string
	}{
		{"returned error", &backend.TaskError{Task: "examples.square", Attempt: 2, Message: "negative input"},
			"task examples.square failed (attempt 2): negative input"},
		{"panic", &backend.TaskError{Task: "counter.add", Message: "index out of range", Panicked: true, Stack: "goroutine 1"},
			"task counter.add panicked (attempt 0): index out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(tt.err.Error(), tt.want)
			is.True(errors.Is(tt.err, backend.ErrTaskFailed))
			is.True(!errors.Is(tt.err, backend.ErrInternal))
			is.True(!strings.Contains(tt.err.Error(), "goroutine")) // the stack is not part of the message

			// As goray returns it: a TaskFailed *Error around the *TaskError.
			wrapped := &backend.Error{Code: backend.TaskFailed, Err: tt.err}
			is.Equal(backend.CodeOf(wrapped), backend.TaskFailed)
			is.True(errors.Is(wrapped, backend.ErrTaskFailed))
			var te *backend.TaskError
			is.True(errors.As(fmt.Errorf("get: %w", wrapped), &te))
			is.Equal(te, tt.err)
		})
	}
}
