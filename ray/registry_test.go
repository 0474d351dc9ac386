package ray_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// Registrations are process-wide, so they happen once at package level; the
// tests only attempt the registrations that must panic, which never
// register anything, so the tests can run any number of times.
var (
	regSquare = ray.NewTask("registrytest.square", func(ctx context.Context, x int) (int, error) { return x * x, nil })
	regCheck  = ray.NewTask("registrytest.check", func(ctx context.Context, x int) (int, error) {
		if x < 0 {
			return 0, fmt.Errorf("negative input %d", x)
		}
		return x, nil
	})
	regAny = ray.NewTask("registrytest.any", func(ctx context.Context, in any) (string, error) { return fmt.Sprint(in), nil })
	// regBadOutput returns a value the JSON codec cannot encode (its type,
	// any, passes registration).
	regBadOutput = ray.NewTask("registrytest.badOutput", func(ctx context.Context, _ int) (any, error) { return func() {}, nil })
	// regUntilCanceled returns when its context ends.
	regUntilCanceled = ray.NewTask("registrytest.untilCanceled", func(ctx context.Context, _ int) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	regResources = ray.NewTask("registrytest.resources", func(ctx context.Context, _ int) (ray.Resources, error) {
		rc, ok := ray.Runtime(ctx)
		if !ok {
			return nil, errors.New("no runtime context inside a task")
		}
		return rc.Resources(), nil
	})
	regRuntime = ray.NewTask("registrytest.runtime", func(ctx context.Context, _ int) (runtimeView, error) {
		rc, ok := ray.Runtime(ctx)
		return runtimeView{OK: ok, Task: rc.TaskName(), Node: rc.NodeName(), Attempt: rc.Attempt(), Bundle: rc.BundleIndex(),
			Group: uint64(rc.PlacementGroupID()), Actor: uint64(rc.ActorID()), Role: rc.Env("ROLE"), Labels: rc.NodeLabels()}, nil
	})

	regCounter = ray.NewActorClass("registrytest.counter", func(ctx context.Context, start int) (*regCount, error) {
		return &regCount{n: start}, nil
	})
	regGet = ray.NewMethod(regCounter, "get", func(ctx context.Context, c *regCount, _ struct{}) (int, error) { return c.n, nil })
	// regResActor remembers the resources its constructor ran with.
	regResActor = ray.NewActorClass("registrytest.resActor", func(ctx context.Context, _ int) (*resActor, error) {
		rc, _ := ray.Runtime(ctx)
		return &resActor{ctor: rc.Resources()}, nil
	})
	regCtorResources = ray.NewMethod(regResActor, "ctorResources", func(ctx context.Context, a *resActor, _ struct{}) (ray.Resources, error) {
		return a.ctor, nil
	})
	regCallResources = ray.NewMethod(regResActor, "callResources", func(ctx context.Context, a *resActor, _ struct{}) (ray.Resources, error) {
		rc, _ := ray.Runtime(ctx)
		return rc.Resources(), nil
	})
)

type regCount struct{ n int }

type resActor struct{ ctor ray.Resources }

type runtimeView struct {
	OK               bool
	Task, Node, Role string
	Attempt, Bundle  int
	Group, Actor     uint64
	Labels           map[string]string
}

// panics runs f and returns the panic value's text, and whether it panicked.
func panics(f func()) (msg string, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			msg, panicked = fmt.Sprint(r), true
		}
	}()
	f()
	return "", false
}

func TestRegistrationPanics(t *testing.T) {
	ctx := func(context.Context, int) (int, error) { return 0, nil }
	newCount := func(context.Context, int) (*regCount, error) { return &regCount{}, nil }
	getN := func(context.Context, *regCount, struct{}) (int, error) { return 0, nil }
	tests := []struct {
		name string
		f    func()
		want []string // substrings of the panic message
	}{
		{"empty task name", func() { ray.NewTask("", ctx) }, []string{"NewTask", "empty task name"}},
		{"duplicate task name", func() { ray.NewTask("registrytest.square", ctx) },
			[]string{"NewTask", "duplicate task name", `"registrytest.square"`}},
		{"duplicate task name with other types", func() {
			ray.NewTask("registrytest.square", func(context.Context, string) (string, error) { return "", nil })
		}, []string{"duplicate task name", `"registrytest.square"`}},
		{"task named like an actor class", func() { ray.NewTask("registrytest.counter", ctx) },
			[]string{"NewTask", `"registrytest.counter"`, "already an actor class name"}},
		{"nil task function", func() { ray.NewTask[int, int]("registrytest.nilTask", nil) },
			[]string{"NewTask", "registrytest.nilTask", "nil function"}},
		{"empty actor class name", func() { ray.NewActorClass("", newCount) }, []string{"NewActorClass", "empty actor class name"}},
		{"duplicate actor class", func() { ray.NewActorClass("registrytest.counter", newCount) },
			[]string{"NewActorClass", "duplicate actor class name", `"registrytest.counter"`}},
		{"actor class named like a task", func() { ray.NewActorClass("registrytest.square", newCount) },
			[]string{"NewActorClass", `"registrytest.square"`, "already a task name"}},
		{"nil constructor", func() { ray.NewActorClass[*regCount, int]("registrytest.nilClass", nil) },
			[]string{"NewActorClass", "registrytest.nilClass", "nil constructor"}},
		{"duplicate method", func() { ray.NewMethod(regCounter, "get", getN) },
			[]string{"NewMethod", `duplicate method "get"`, `"registrytest.counter"`}},
		{"empty method name", func() { ray.NewMethod(regCounter, "", getN) },
			[]string{"NewMethod", "empty method name", `"registrytest.counter"`}},
		{"nil method function", func() { ray.NewMethod[*regCount, int, struct{}, int](regCounter, "nilMethod", nil) },
			[]string{"NewMethod", "registrytest.counter.nilMethod", "nil function"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			msg, panicked := panics(tt.f)
			is.True(panicked)
			for _, want := range tt.want {
				is.True(strings.Contains(msg, want)) // the panic names the problem
			}
		})
	}
	t.Run("failed registrations leave nothing behind", func(t *testing.T) {
		is := is.New(t)
		is.True(!slices.Contains(ray.RegisteredTasks(), "registrytest.nilTask"))
		is.True(!slices.Contains(ray.RegisteredTasks(), ""))
		is.True(!slices.Contains(ray.RegisteredActorClasses(), "registrytest.nilClass"))
		is.True(!slices.Contains(ray.RegisteredActorClasses(), "registrytest.square"))
	})
}

func TestRegisteredNames(t *testing.T) {
	t.Run("tasks", func(t *testing.T) {
		is := is.New(t)
		names := ray.RegisteredTasks()
		is.True(slices.IsSorted(names))
		for _, want := range []string{"registrytest.square", "registrytest.check", "registrytest.any"} {
			is.True(slices.Contains(names, want))
		}
		is.True(!slices.Contains(names, "registrytest.counter")) // classes are not tasks
	})
	t.Run("actor classes", func(t *testing.T) {
		is := is.New(t)
		names := ray.RegisteredActorClasses()
		is.True(slices.IsSorted(names))
		is.True(slices.Contains(names, "registrytest.counter"))
		is.True(!slices.Contains(names, "registrytest.square"))
	})
	t.Run("names", func(t *testing.T) {
		is := is.New(t)
		is.Equal(regSquare.Name(), "registrytest.square")
		is.Equal(regCounter.Name(), "registrytest.counter")
		is.Equal(regGet.Name(), "registrytest.counter.get")
	})
}

func TestLookupTask(t *testing.T) {
	t.Run("found", func(t *testing.T) {
		is := is.New(t)
		task, err := ray.LookupTask[int, int]("registrytest.square")
		is.NoErr(err)
		is.Equal(task.Name(), "registrytest.square")
		c := localCluster(t, nil)
		v, err := task.Remote(context.Background(), c, 7).Get(context.Background())
		is.NoErr(err)
		is.Equal(v, 49) // a looked-up task runs the registered function
	})
	t.Run("not found lists the registered tasks", func(t *testing.T) {
		is := is.New(t)
		task, err := ray.LookupTask[int, int]("registrytest.nope")
		is.True(task == nil)
		is.Equal(ray.CodeOf(err), ray.NotFound)
		is.True(errors.Is(err, ray.ErrNotFound))
		is.True(strings.Contains(err.Error(), `"registrytest.nope"`))
		is.True(strings.Contains(err.Error(), "registrytest.square")) // says what is registered
	})
	t.Run("type mismatch", func(t *testing.T) {
		is := is.New(t)
		task, err := ray.LookupTask[string, int]("registrytest.square")
		is.True(task == nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "func(int) int"))
		is.True(strings.Contains(err.Error(), "not func(string) int"))
	})
	t.Run("output type mismatch", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.LookupTask[int, int64]("registrytest.square")
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("an actor class is not a task", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.LookupTask[int, int]("registrytest.counter")
		is.Equal(ray.CodeOf(err), ray.NotFound)
	})
}

func TestRuntimeOutsideTask(t *testing.T) {
	check := func(is *is.I, rc ray.RuntimeContext) {
		is.Equal(rc.TaskName(), "")
		is.Equal(rc.Attempt(), 0)
		is.Equal(rc.NodeName(), "")
		is.Equal(len(rc.NodeLabels()), 0)
		is.Equal(len(rc.Resources()), 0)
		is.Equal(rc.PlacementGroupID(), backend.PlacementGroupID(0))
		is.Equal(rc.BundleIndex(), -1)
		is.Equal(rc.Env("TPU_WORKER_ID"), "")
		is.Equal(len(rc.Environ()), 0)
		is.Equal(rc.ActorID(), backend.ActorID(0))
	}
	t.Run("Runtime", func(t *testing.T) {
		is := is.New(t)
		rc, ok := ray.Runtime(context.Background())
		is.True(!ok)
		check(is, rc)
	})
	t.Run("zero RuntimeContext", func(t *testing.T) {
		is := is.New(t)
		check(is, ray.RuntimeContext{})
	})
	t.Run("nil info in the context", func(t *testing.T) {
		is := is.New(t)
		ctx := context.WithValue(context.Background(), backend.RuntimeInfoKey{}, (*backend.RuntimeInfo)(nil))
		rc, ok := ray.Runtime(ctx)
		is.True(!ok)
		check(is, rc)
	})
}

func TestRuntimeInsideTask(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c := localCluster(t, []local.NodeSpec{{Name: "only", Resources: backend.Resources{backend.CPU: 2},
		Env: map[string]string{"ROLE": "worker"}, Labels: map[string]string{"zone": "a"}}})
	v, err := regRuntime.Remote(ctx, c, 0).Get(ctx)
	is.NoErr(err)
	is.Equal(v, runtimeView{OK: true, Task: "registrytest.runtime", Node: "only", Bundle: -1, Role: "worker",
		Labels: map[string]string{"zone": "a"}})
}

// startOnly is a backend that implements Start and nothing else; any other
// method panics on the nil embedded interface.
type startOnly struct {
	backend.Backend
	err     error
	started bool
}

func (s *startOnly) Start(ctx context.Context, exec backend.Executor) error {
	s.started = true
	return s.err
}

// noNative claims the NativeValues capability but declines it.
type noNative struct{ startOnly }

func (*noNative) SupportsNativeValues() bool { return false }

func TestNewCluster(t *testing.T) {
	ctx := context.Background()
	t.Run("nil backend", func(t *testing.T) {
		is := is.New(t)
		c, err := ray.NewCluster(ctx, nil, nil)
		is.True(c == nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "nil backend"))
	})
	t.Run("DisableCodec without NativeValues", func(t *testing.T) {
		is := is.New(t)
		b := &startOnly{}
		c, err := ray.NewCluster(ctx, b, &ray.Options{DisableCodec: true})
		is.True(c == nil)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "DisableCodec"))
		is.True(strings.Contains(err.Error(), "*ray_test.startOnly")) // names the backend
		is.True(!b.started)                                           // fails before starting the backend
	})
	t.Run("DisableCodec when NativeValues says no", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.NewCluster(ctx, &noNative{}, &ray.Options{DisableCodec: true})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
	t.Run("DisableCodec on the fake backend", func(t *testing.T) {
		is := is.New(t)
		c, err := ray.NewCluster(ctx, fake.New(nil), &ray.Options{DisableCodec: true})
		is.NoErr(err)
		is.NoErr(c.Close())
	})
	t.Run("codec on a minimal backend", func(t *testing.T) {
		is := is.New(t)
		b := &startOnly{}
		c, err := ray.NewCluster(ctx, b, nil)
		is.NoErr(err)
		is.True(b.started)
		is.Equal(c.Backend(), backend.Backend(b))
		_, err = c.Snapshot(ctx)
		is.Equal(ray.CodeOf(err), ray.Unimplemented) // no Snapshotter
		_, err = ray.TPUSlices(ctx, c)
		is.Equal(ray.CodeOf(err), ray.Unimplemented) // no SliceReserver
	})
	t.Run("Start error keeps its code", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.NewCluster(ctx, &startOnly{err: backend.Errorf(backend.Unavailable, "dial", "connection refused")}, nil)
		is.Equal(ray.CodeOf(err), ray.Unavailable)
		is.True(strings.HasPrefix(err.Error(), "create cluster: "))
		is.True(strings.Contains(err.Error(), "connection refused"))
	})
	t.Run("Start context error is returned as is", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.NewCluster(ctx, &startOnly{err: context.Canceled}, nil)
		is.Equal(err, context.Canceled)
	})
}

// localCluster returns a cluster on backend/local with the given nodes (by
// default one node with 4 CPUs), closed when the test ends.
func localCluster(t *testing.T, nodes []local.NodeSpec, opts ...*ray.Options) *ray.Cluster {
	t.Helper()
	if nodes == nil {
		nodes = []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 4}}}
	}
	b, err := local.New(local.ClusterSpec{Nodes: nodes}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var o *ray.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	c, err := ray.NewCluster(context.Background(), b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// httpErr is an error that chooses an HTTP status, as serve's StatusError
// does.
type httpErr struct{ status int }

func (e httpErr) Error() string   { return "status " + fmt.Sprint(e.status) }
func (e httpErr) HTTPStatus() int { return e.status }

var regStatus = ray.NewTask("registrytest.status", func(ctx context.Context, in statusIn) (int, error) {
	switch {
	case in.Text != "":
		return 0, errors.New(in.Text)
	case in.Nested:
		// the error of a task it called, which chose 503, wrapped
		err := &backend.Error{Code: backend.TaskFailed, Err: &ray.TaskError{Task: "up", Message: "busy", Status: 503}}
		return 0, fmt.Errorf("upstream: %w", err)
	}
	return 0, fmt.Errorf("wrapped: %w", httpErr{in.Status})
})

type statusIn struct {
	Status int
	Text   string
	Nested bool
}

// A user error's HTTP status (its chain's HTTPStatus method) is recorded
// in the TaskError's Status; a message's text is no status.
func TestTaskErrorStatus(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, nil)
	for _, tc := range []struct {
		name string
		in   statusIn
		want int
	}{
		{"wrapped", statusIn{Status: 429}, 429},
		{"not an error status", statusIn{Status: 200}, 0},
		{"text", statusIn{Text: "no model [HTTP 404]"}, 0},
		{"nested", statusIn{Nested: true}, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, err := regStatus.Remote(ctx, c, tc.in).Get(ctx)
			var te *ray.TaskError
			is.True(errors.As(err, &te))
			is.Equal(te.Status, tc.want)
		})
	}
}
