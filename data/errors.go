package data

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/goray-dev/goray/backend"
)

// Pos is where a row came from: its source (a file's key, or "items" or
// "range" for in-memory sources) and its index there, counting from 0.
// Line is the 1-based line of a text file (JSON Lines, CSV), 0 otherwise.
// Rows made by an operator keep the position of the input row they came
// from (for a batch whose output does not match its input row for row,
// the batch's first row).
type Pos struct {
	Source string
	Row    int64
	Line   int64
}

func (p Pos) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d (row %d)", p.Source, p.Line, p.Row)
	}
	return fmt.Sprintf("%s row %d", p.Source, p.Row)
}

// RowError is a bad row: one that a source could not decode or an operator
// failed on. By default the first one fails the run, and the run's error
// wraps it; with [SkipBadRows] each is reported in [Stats].BadRows.
type RowError struct {
	// Op is the operator (or source) that failed on the row.
	Op  string
	Pos Pos
	Err error

	decode bool // a source could not decode the row (else a function failed on it)
}

func (e *RowError) Error() string {
	return fmt.Sprintf("data: %s: bad row at %s: %v", e.Op, e.Pos, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// ErrTooManyBadRows is matched (errors.Is) by the error of a run that met
// more bad rows than [SkipBadRows] allowed.
var ErrTooManyBadRows = errors.New("data: too many bad rows")

// SourceError is a source that failed while reading (an I/O error, a file
// that is not of its format), as opposed to one bad row in it. It always
// fails the run. Pos is the position of the first row not read.
type SourceError struct {
	Pos Pos
	Err error
}

func (e *SourceError) Error() string {
	return fmt.Sprintf("data: reading %s failed at row %d: %v", e.Pos.Source, e.Pos.Row, e.Err)
}

func (e *SourceError) Unwrap() error { return e.Err }

// badRows counts and keeps the bad rows of a run.
type badRows struct {
	max  int
	mu   sync.Mutex
	rows []RowError
}

// add records a bad row, and returns the error that fails the run when the
// cap is exceeded.
func (b *badRows) add(e *RowError) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rows) >= b.max {
		if b.max == 0 {
			return e
		}
		return fmt.Errorf("%w: more than %d (SkipBadRows); this one: %w", ErrTooManyBadRows, b.max, e)
	}
	b.rows = append(b.rows, *e)
	return nil
}

func (b *badRows) list() []RowError {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]RowError(nil), b.rows...)
}

// PanicError is a panic in a source or an operator's function, recovered
// in the goroutine that ran it, or in the worker process or pod that ran a
// registered function or method (Value is then the ray error, whose cause
// is a *ray.TaskError, and Stack the worker's). It fails the run, also
// with SkipBadRows (a panic is a bug, not a bad row), and no stream ends
// as complete after it.
type PanicError struct {
	// Op is the source or operator whose function panicked.
	Op string
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack where it panicked.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("data: %s panicked: %v", e.Op, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// recovered runs f, turning a panic in it into a *PanicError for op.
func recovered(op string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Op: op, Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

// errTooLong is matched by the error of a row (a line, a record, a file)
// over its size limit ([MaxLineBytes]); such errors are coded
// ResourceExhausted.
var errTooLong = errors.New("longer than MaxLineBytes")

// errFileTooLarge is errTooLong for a whole file ([MaxFileBytes]).
var errFileTooLarge = errors.New("file larger than MaxFileBytes")

// coded gives err a code from the closed set (ray.CodeOf, errors.Is with
// ray.ErrInvalidArgument and the other sentinels) when it has none yet,
// keeping its message and chain: every error that package data returns
// goes through it.
//
//   - bad input: a row a source cannot decode, a bad option or argument,
//     a file that is not of its format: InvalidArgument;
//   - a file, folder or glob that names nothing: NotFound;
//   - a row, line, record or file over its size limit: ResourceExhausted;
//   - an unreadable file (permissions): FailedPrecondition;
//   - an I/O error reading or writing: Unavailable;
//   - a row a function failed on, a panic: TaskFailed;
//   - a context error stays as it is; errors of the cluster (an actor
//     that died, ...) and of package storage keep their codes.
//
// Anything else is a bug of this package: Internal.
func coded(err error) error {
	if err == nil || backend.CodeOf(err) != backend.Unknown {
		return err
	}
	return &backend.Error{Code: codeFor(err), Err: err}
}

func codeFor(err error) backend.Code {
	var (
		pe    *PanicError
		re    *RowError
		se    *SourceError
		path  *fs.PathError
		errno syscall.Errno
	)
	switch {
	case errors.Is(err, errTooLong) || errors.Is(err, errRecordTooLong) || errors.Is(err, errFileTooLarge):
		return backend.ResourceExhausted
	case errors.Is(err, fs.ErrNotExist):
		return backend.NotFound
	case errors.Is(err, fs.ErrPermission):
		return backend.FailedPrecondition
	case errors.As(err, &pe):
		return backend.TaskFailed
	case errors.As(err, &re):
		if re.decode {
			return backend.InvalidArgument
		}
		return backend.TaskFailed
	case errors.As(err, &path) || errors.As(err, &errno):
		return backend.Unavailable
	case errors.As(err, &se):
		return backend.InvalidArgument // read, but not of its format
	}
	return backend.Internal
}

// notFound is the error of files that name nothing.
func notFound(format string, args ...any) error {
	return backend.Errorf(backend.NotFound, "", format, args...)
}
