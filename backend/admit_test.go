package backend_test

import (
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// registry is an Executor that knows one task and one actor class.
type registry struct{ backend.Executor }

func (registry) HasTask(name string) bool            { return name == "sq" }
func (registry) HasActorMethod(class, _ string) bool { return class == "Counter" }

func TestReop(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil stays nil", nil, ""},
		{"an *Error keeps its cause", backend.Errorf(backend.Internal, "inner op", "%w", cause), "outer op: boom"},
		{"a plain error becomes the cause", cause, "outer op: boom"},
		{"a sentinel is kept whole", backend.ErrNotFound, "outer op: goray: NotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			err := backend.Reop(backend.InvalidArgument, "outer op", tc.err)
			if tc.err == nil {
				is.NoErr(err)
				return
			}
			is.Equal(err.Error(), tc.want)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument)
		})
	}
}

func TestAdmission(t *testing.T) {
	live := func(name string) (backend.ActorID, bool) { return 7, name == "taken" }
	tests := []struct {
		name string
		err  error
		code backend.Code
		msg  string
	}{
		{"nil task spec", (*backend.TaskSpec)(nil).Check("submit task", registry{}), backend.InvalidArgument, "submit task: nil task spec"},
		{"empty task name", (&backend.TaskSpec{}).Check("submit task ", registry{}), backend.InvalidArgument, "submit task : empty task name"},
		{"unregistered task", (&backend.TaskSpec{Name: "x"}).Check("submit task x", registry{}), backend.NotFound, `submit task x: task "x" is not registered`},
		{"registered task", (&backend.TaskSpec{Name: "sq"}).Check("submit task sq", registry{}), backend.OK, ""},
		{"nil actor spec", (*backend.ActorSpec)(nil).Check("create actor", registry{}, live), backend.InvalidArgument, "create actor: nil actor spec"},
		{"unregistered class", (&backend.ActorSpec{Class: "X"}).Check("create actor X", registry{}, live), backend.NotFound, `create actor X: actor class "X" is not registered`},
		{"name taken", (&backend.ActorSpec{Class: "Counter", Name: "taken"}).Check("create actor Counter", registry{}, live), backend.AlreadyExists, `create actor Counter: an actor named "taken" already exists (actor-7)`},
		{"ref argument", (&backend.ActorSpec{Class: "Counter", Arg: backend.Arg{Ref: 3}}).Check("create actor Counter", registry{}, live), backend.InvalidArgument, "create actor Counter: actor constructors take a value, not a ref"},
		{"bundle index", backend.CheckBundleIndex("submit task sq", 4, 2, 2), backend.InvalidArgument, "submit task sq: bundle index 2 out of range: pg-4 has 2 bundles (use -1 for any)"},
		{"any bundle", backend.CheckBundleIndex("submit task sq", 4, -1, 2), backend.OK, ""},
		{"misfit", backend.BundleMisfit("submit task sq", backend.Resources{backend.CPU: 2}, -1, 4), backend.Infeasible, "submit task sq: {CPU: 2} does not fit in bundle (any) of pg-4"},
		{"not found", backend.PlacementGroupNotFound("remove placement group", 4), backend.NotFound, "remove placement group: placement group pg-4 does not exist"},
		{"removed", backend.PlacementGroupRemovedError(4), backend.FailedPrecondition, "placement group pg-4: placement group removed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.CodeOf(tc.err), tc.code)
			if tc.code == backend.OK {
				return
			}
			is.Equal(tc.err.Error(), tc.msg)
		})
	}
	t.Run("removed matches its sentinel", func(t *testing.T) {
		is := is.New(t)
		is.True(errors.Is(backend.PlacementGroupRemovedError(1), backend.ErrPlacementGroupRemoved))
	})
}

func TestOverlayEnv(t *testing.T) {
	is := is.New(t)
	base := map[string]string{"A": "1", "B": "2"}
	is.Equal(backend.OverlayEnv(base, nil)["A"], "1")
	got := backend.OverlayEnv(base, map[string]string{"B": "3", "C": "4"})
	is.Equal(got, map[string]string{"A": "1", "B": "3", "C": "4"})
	is.Equal(base["B"], "2") // base is not modified
	is.Equal(backend.OverlayEnv(nil, map[string]string{"C": "4"}), map[string]string{"C": "4"})
}
