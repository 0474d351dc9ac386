package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/goray-dev/goray/backend"
)

// errf returns an error with code and a message formatted as by
// fmt.Errorf (so %w wraps).
func errf(code backend.Code, format string, args ...any) error {
	return &backend.Error{Code: code, Err: fmt.Errorf(format, args...)}
}

// wrapf is errf with the code of the error it wraps ([codeOfCause]).
func wrapf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &backend.Error{Code: codeOfCause(err), Err: err}
}

// codeOfCause returns the code a bucket's error gets from its cause: the
// cause's own code if it has one (a goray error, a context error), else
// the code of an io/fs or system error as listed above, else Unavailable
// (an I/O failure of the store).
func codeOfCause(err error) backend.Code {
	if c := backend.CodeOf(err); c != backend.Unknown {
		return c
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return backend.NotFound
	case errors.Is(err, fs.ErrExist):
		return backend.AlreadyExists
	case errors.Is(err, fs.ErrPermission):
		return backend.FailedPrecondition
	case errors.Is(err, fs.ErrInvalid):
		return backend.InvalidArgument
	case errors.Is(err, syscall.ENOSPC):
		return backend.ResourceExhausted
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return backend.FailedPrecondition // a file or directory in the way
	}
	return backend.Unavailable
}
