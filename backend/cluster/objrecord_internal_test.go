package cluster

import (
	"context"
	"runtime"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// echoExec runs every task and method by returning its input.
type echoExec struct{}

func (echoExec) HasTask(string) bool                { return true }
func (echoExec) HasActorMethod(string, string) bool { return true }
func (echoExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return arg, nil
}
func (echoExec) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return echoActor{}, nil
}

type echoActor struct{}

func (echoActor) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return arg, nil
}

// TestFinishedWorkDropsItsRecord: the result of a finished task or actor
// call stays in the object table without the work's record (which is
// garbage from then on), and what the record told still holds: a done
// task's Cancel does nothing, a done call's Cancel with Force is still
// refused, a Put value is no work's result.
func TestFinishedWorkDropsItsRecord(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	rt, err := New(NewStaticSource([]Node{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}), GoroutineRunner{}, Options{NativeValues: true})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, echoExec{}))
	defer rt.Close()

	id, err := rt.SubmitTask(ctx, &backend.TaskSpec{Name: "echo", Arg: backend.Arg{Value: backend.Value{Data: []byte("t")}},
		Scheduling: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1}, Placement: backend.Placement{Bundle: -1}}})
	is.NoErr(err)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "t")

	aid, err := rt.CreateActor(ctx, &backend.ActorSpec{Class: "a", MaxConcurrency: 1, Scheduling: backend.Scheduling{Placement: backend.Placement{Bundle: -1}}})
	is.NoErr(err)
	is.NoErr(rt.ActorReady(ctx, aid))
	cid, err := rt.CallActor(ctx, &backend.CallSpec{Actor: aid, Class: "a", Method: "m", Arg: backend.Arg{Value: backend.Value{Data: []byte("c")}}})
	is.NoErr(err)
	v, err = rt.Get(ctx, cid)
	is.NoErr(err)
	is.Equal(string(v.Data), "c")

	pid, err := rt.Put(ctx, backend.Value{Data: []byte("p")})
	is.NoErr(err)

	rt.mu.Lock()
	for _, tc := range []struct {
		id   backend.ObjectID
		work workKind
	}{{id, workTask}, {cid, workCall}, {pid, workNone}} {
		o := rt.objects.get(tc.id)
		is.True(o != nil)
		is.True(o.done)
		is.Equal(o.work, tc.work)
		is.True(o.task == nil && o.call == nil) // no record kept
	}
	rt.mu.Unlock()

	is.NoErr(rt.CancelTask(ctx, id, backend.CancelOptions{Force: true}))                                           // done: nothing to do
	is.Equal(backend.CodeOf(rt.CancelTask(ctx, cid, backend.CancelOptions{Force: true})), backend.InvalidArgument) // Force on a call
	is.NoErr(rt.CancelTask(ctx, cid, backend.CancelOptions{}))
	is.Equal(backend.CodeOf(rt.CancelTask(ctx, pid, backend.CancelOptions{})), backend.NotFound) // not work's result
}

// TestGetRacingFree: a Get woken by its object's completion while a Free
// deletes the object (its slot cleared) reads the result under the lock:
// the value, or NotFound, never a torn or cleared value (go test -race).
func TestGetRacingFree(t *testing.T) {
	is := is.New(t)
	rt := &Runtime{}
	for range 200 {
		rt.mu.Lock()
		o := rt.newObject()
		id := o.id
		rt.mu.Unlock()
		got := make(chan error, 1)
		go func() {
			v, err := rt.Get(context.Background(), id)
			if err == nil && string(v.Data) != "v" {
				err = backend.Errorf(backend.Internal, "test", "got %q", v.Data)
			}
			got <- err
		}()
		for {
			rt.mu.Lock()
			waiting := o.ch != nil
			if waiting {
				rt.completeLocked(o, backend.Value{Data: []byte("v")}, nil)
			}
			rt.mu.Unlock()
			if waiting {
				break
			}
			runtime.Gosched()
		}
		rt.Free(id)
		err := <-got
		is.True(err == nil || backend.CodeOf(err) == backend.NotFound)
		rt.mu.Lock()
		is.True(rt.objects.get(id) == nil)
		rt.mu.Unlock()
	}
}
