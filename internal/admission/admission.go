// Package admission holds what the cluster runtime (backend/cluster) and
// the fake backend share beyond the driver contract of package backend:
// the errors both give for placement groups and bundles, the env of work
// in a bundle, and the ring of recent task failures a snapshot lists. It
// is internal: a backend built on the runtime gets all of this from it.
package admission

import (
	"maps"
	"strconv"
	"time"

	"github.com/goray-dev/goray/backend"
)

// PlacementGroupNotFound is the backend.NotFound error of work or a call naming a
// placement group the backend never had.
func PlacementGroupNotFound(op string, id backend.PlacementGroupID) error {
	return backend.Errorf(backend.NotFound, op, "placement group %s does not exist", id)
}

// PlacementGroupRemovedError is the error of work pinned to, queued in or
// running in a removed placement group (code backend.FailedPrecondition, matching
// [ErrPlacementGroupRemoved]).
func PlacementGroupRemovedError(id backend.PlacementGroupID) error {
	return backend.Errorf(backend.FailedPrecondition, "placement group "+id.String(), "%w", backend.ErrPlacementGroupRemoved)
}

// CheckBundleIndex validates the bundle index of work pinned to a group of n
// bundles: -1 (any bundle) or 0 to n-1.
func CheckBundleIndex(op string, id backend.PlacementGroupID, i, n int) error {
	if i >= n || i < -1 {
		return backend.Errorf(backend.InvalidArgument, op, "bundle index %d out of range: %s has %d bundles (use -1 for any)", i, id, n)
	}
	return nil
}

// BundleMisfit is the backend.Infeasible error of work whose resources fit in no
// bundle it may use (bundle -1 means any bundle).
func BundleMisfit(op string, need backend.Resources, bundle int, id backend.PlacementGroupID) error {
	which := "(any)"
	if bundle >= 0 {
		which = strconv.Itoa(bundle)
	}
	return backend.Errorf(backend.Infeasible, op, "%s does not fit in bundle %s of %s", need, which, id)
}

// OverlayEnv returns the runtime env of work in a bundle: base with over's
// variables added or replaced. It returns base itself when over is empty
// (callers must not modify the result) and a new map otherwise.
func OverlayEnv(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	env := maps.Clone(base)
	if env == nil {
		env = make(map[string]string, len(over))
	}
	maps.Copy(env, over)
	return env
}

// NewTaskFailure describes a failed attempt of task on node, now.
func NewTaskFailure(task string, attempt int, node string, err error) backend.TaskFailure {
	return backend.TaskFailure{Task: task, Attempt: attempt, Node: node, Code: backend.CodeOf(err), Message: err.Error(), Time: time.Now()}
}

// FailureRing keeps the last [backend.RecentFailures] failures in constant memory:
// a new failure overwrites the oldest. The zero value is empty and ready
// to use; it allocates on its first failure. A FailureRing is not safe for
// concurrent use: backends add and list under their own lock.
type FailureRing struct {
	buf  []backend.TaskFailure
	next int // where the next failure goes once buf is full
}

// Add records f, dropping the oldest failure if the ring is full.
func (r *FailureRing) Add(f backend.TaskFailure) {
	if len(r.buf) < backend.RecentFailures {
		if r.buf == nil {
			r.buf = make([]backend.TaskFailure, 0, backend.RecentFailures)
		}
		r.buf = append(r.buf, f)
		return
	}
	r.buf[r.next] = f
	r.next = (r.next + 1) % backend.RecentFailures
}

// List returns a copy of the failures, oldest first, or nil if there are
// none.
func (r *FailureRing) List() []backend.TaskFailure {
	if len(r.buf) == 0 {
		return nil
	}
	out := make([]backend.TaskFailure, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
