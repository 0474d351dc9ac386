package backend

import (
	"maps"
	"strconv"
)

// The checks in this file are the admission rules every backend applies, in
// one place so that backends agree on what they refuse and on the words of
// the refusal. Each takes the operation name of the caller, a plain verb
// phrase such as "submit task examples.square".

// Check validates a task submission against the registered code: a
// non-nil spec whose task name is registered with exec. It does not look at
// the scheduling options; backends check those against their nodes.
func (s *TaskSpec) Check(op string, exec Executor) error {
	switch {
	case s == nil:
		return Errorf(InvalidArgument, op, "nil task spec")
	case s.Name == "":
		return Errorf(InvalidArgument, op, "empty task name")
	case !exec.HasTask(s.Name):
		return Errorf(NotFound, op, "task %q is not registered", s.Name)
	}
	return nil
}

// Check validates an actor creation: a non-nil spec of a registered class,
// a name no live actor has (live reports the live actor of a name), and a
// constructor argument given as a value, not a ref.
func (s *ActorSpec) Check(op string, exec Executor, live func(name string) (ActorID, bool)) error {
	switch {
	case s == nil:
		return Errorf(InvalidArgument, op, "nil actor spec")
	case s.Class == "":
		return Errorf(InvalidArgument, op, "empty actor class name")
	case !exec.HasActorMethod(s.Class, ""):
		return Errorf(NotFound, op, "actor class %q is not registered", s.Class)
	}
	if s.Name != "" {
		if other, ok := live(s.Name); ok {
			return Errorf(AlreadyExists, op, "an actor named %q already exists (%s)", s.Name, other)
		}
	}
	if s.Arg.Ref != 0 {
		return Errorf(InvalidArgument, op, "actor constructors take a value, not a ref")
	}
	return nil
}

// PlacementGroupNotFound is the NotFound error of work or a call naming a
// placement group the backend never had.
func PlacementGroupNotFound(op string, id PlacementGroupID) error {
	return Errorf(NotFound, op, "placement group %s does not exist", id)
}

// PlacementGroupRemovedError is the error of work pinned to, queued in or
// running in a removed placement group (code FailedPrecondition, matching
// [ErrPlacementGroupRemoved]).
func PlacementGroupRemovedError(id PlacementGroupID) error {
	return Errorf(FailedPrecondition, "placement group "+id.String(), "%w", ErrPlacementGroupRemoved)
}

// CheckBundleIndex validates the bundle index of work pinned to a group of n
// bundles: -1 (any bundle) or 0 to n-1.
func CheckBundleIndex(op string, id PlacementGroupID, i, n int) error {
	if i >= n || i < -1 {
		return Errorf(InvalidArgument, op, "bundle index %d out of range: %s has %d bundles (use -1 for any)", i, id, n)
	}
	return nil
}

// BundleMisfit is the Infeasible error of work whose resources fit in no
// bundle it may use (bundle -1 means any bundle).
func BundleMisfit(op string, need Resources, bundle int, id PlacementGroupID) error {
	which := "(any)"
	if bundle >= 0 {
		which = strconv.Itoa(bundle)
	}
	return Errorf(Infeasible, op, "%s does not fit in bundle %s of %s", need, which, id)
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
