package train

import (
	"errors"
	"fmt"
)

// ErrWorkerFailed matches a [WorkerFailedError] with errors.Is.
var ErrWorkerFailed = errors.New("train: a worker of the run failed")

// WorkerFailedError is the error every pending and later collective of a
// worker returns once another worker of the run has failed (its loop
// returned an error, its host died, its process exited or its connection
// broke). Rank names the worker that failed first.
type WorkerFailedError struct {
	// Rank is the failed worker's rank.
	Rank int
	// Cause says why it failed, as reported by the worker or the driver.
	Cause string
}

func (e *WorkerFailedError) Error() string {
	return fmt.Sprintf("train: worker rank %d failed: %s", e.Rank, e.Cause)
}

// Is reports whether target is [ErrWorkerFailed].
func (e *WorkerFailedError) Is(target error) bool { return target == ErrWorkerFailed }

// Unwrap gives the error its code, Unavailable (ray.CodeOf): another
// worker was lost, and the run restarts.
func (e *WorkerFailedError) Unwrap() error { return workerFailedCode }
