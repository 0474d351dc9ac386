package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/goray-dev/goray/backend"
)

// Every error of this package's buckets and of [Open] carries a code of
// goray's closed set (backend.Code; ray.Code reads it), so that code can
// branch on what went wrong without matching messages:
//
//   - NotFound: no object at the key (errors.Is(err, ErrNotExist) also
//     holds);
//   - InvalidArgument: a bad key, prefix, offset or URL, a URL scheme no
//     driver exists for, a path that is a file, not a directory;
//   - FailedPrecondition: the bucket is closed (errors.Is(err, ErrClosed)),
//     a writer used after its Close, a scheme whose driver is not linked
//     in (gs://, s3://, azblob:// without importing storage/gocloud: the
//     message names the imports to add), permission denied;
//   - AlreadyExists: an object where a write needs a directory ("a/b"
//     when "a" is an object);
//   - ResourceExhausted: the disk is full;
//   - Canceled and DeadlineExceeded: the context ended;
//   - Unavailable: any other I/O failure of the underlying store.
//
// The messages are unchanged: the code rides on the error, not in its text.

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
