package train

import (
	"errors"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
)

// Every error train returns carries a code of the closed set (ray.CodeOf):
// InvalidArgument for a bad configuration or argument, NotFound for a
// name or a checkpoint that does not exist, FailedPrecondition for a call
// out of place (or storage in a bad state), Unavailable for a lost worker,
// host or connection (and WorkerFailedError), DeadlineExceeded for a wait
// that timed out, Canceled for a cancelled run, TaskFailed for a loop's
// or program's own failure, and the code of the cluster's error where
// one is the cause. withCode gives err the code when it has none.
func withCode(code backend.Code, err error) error {
	if err == nil || ray.CodeOf(err) != ray.Unknown {
		return err
	}
	return &backend.Error{Code: code, Err: err}
}

// storageErr gives an error of checkpoint storage its code: NotFound for
// a missing object, FailedPrecondition for a closed bucket,
// InvalidArgument for a bad key, Unavailable otherwise (I/O).
func storageErr(err error) error {
	switch {
	case err == nil || ray.CodeOf(err) != ray.Unknown:
		return err
	case errors.Is(err, storage.ErrNotExist):
		return withCode(backend.NotFound, err)
	case errors.Is(err, storage.ErrClosed):
		return withCode(backend.FailedPrecondition, err)
	}
	return withCode(backend.Unavailable, err)
}

// collectiveErr gives a collective's error its code: FailedPrecondition
// when the ranks called different collectives, Unavailable otherwise (a
// peer or the connection was lost; WorkerFailedError has it already).
func collectiveErr(err error) error {
	var mm *mismatchError
	if errors.As(err, &mm) {
		return withCode(backend.FailedPrecondition, err)
	}
	return withCode(backend.Unavailable, err)
}

// workerFailedCode is what a WorkerFailedError unwraps to, for its code.
var workerFailedCode = &backend.Error{Code: backend.Unavailable, Err: ErrWorkerFailed}
