package ray

import "github.com/goray-dev/goray/backend"

// ErrorCode is the closed set of error codes (backend.Code); [CodeOf]
// reads the code of any error.
//
// One name per thing: goray's error code type is Code and its lookup
// CodeOf, in package backend and, once the deprecated function [Code]
// is removed before the first release, in this package too (as gRPC's
// codes.Code, with a lookup that cannot be mistaken for the type). Until
// then the type is named ErrorCode here.
type ErrorCode = backend.Code

// The error codes. See package backend for their meaning.
const (
	OK                 = backend.OK
	Unknown            = backend.Unknown
	InvalidArgument    = backend.InvalidArgument
	NotFound           = backend.NotFound
	AlreadyExists      = backend.AlreadyExists
	FailedPrecondition = backend.FailedPrecondition
	ResourceExhausted  = backend.ResourceExhausted
	Infeasible         = backend.Infeasible
	Unavailable        = backend.Unavailable
	DeadlineExceeded   = backend.DeadlineExceeded
	Canceled           = backend.Canceled
	TaskFailed         = backend.TaskFailed
	ActorDied          = backend.ActorDied
	Unimplemented      = backend.Unimplemented
	Internal           = backend.Internal
)

// CodeOf returns the code of err: OK for nil, Canceled or DeadlineExceeded
// for context errors, the code of a goray error (of the libraries train,
// serve, data and storage too), Unknown otherwise.
func CodeOf(err error) ErrorCode { return backend.CodeOf(err) }

// Code returns the code of err, as [CodeOf] does.
//
// Deprecated: use CodeOf, the name package backend uses too; this name
// is to be the type's (see [ErrorCode]).
func Code(err error) ErrorCode { return backend.CodeOf(err) }

// Sentinels for errors.Is. Every goray error matches the sentinel of its code.
var (
	ErrInvalidArgument    = backend.ErrInvalidArgument
	ErrNotFound           = backend.ErrNotFound
	ErrAlreadyExists      = backend.ErrAlreadyExists
	ErrFailedPrecondition = backend.ErrFailedPrecondition
	ErrResourceExhausted  = backend.ErrResourceExhausted
	ErrInfeasible         = backend.ErrInfeasible
	ErrUnavailable        = backend.ErrUnavailable
	ErrTaskFailed         = backend.ErrTaskFailed
	ErrActorDied          = backend.ErrActorDied
	ErrUnimplemented      = backend.ErrUnimplemented
	ErrInternal           = backend.ErrInternal

	// ErrClosed matches every error caused by a closed cluster.
	ErrClosed = backend.ErrClosed
	// ErrPlacementGroupRemoved matches the error of work whose placement
	// group was removed.
	ErrPlacementGroupRemoved = backend.ErrPlacementGroupRemoved
)

// Error is the type of goray's errors; use errors.As to read its code and
// operation.
type Error = backend.Error

// TaskError is the cause of a TaskFailed error: the task's name, the attempt
// and, for a panic, the stack of the goroutine that panicked.
type TaskError = backend.TaskError
