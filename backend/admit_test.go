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
}
