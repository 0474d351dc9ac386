package cluster

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// ctxExec's actor's method m looks at nothing; "look" looks at its
// context; "keep" hands it to kept without looking, "pin" after looking;
// "spawn" starts a goroutine that looks at it.
type ctxExec struct {
	kept chan context.Context
	wg   sync.WaitGroup
}

func (*ctxExec) HasTask(string) bool                { return true }
func (*ctxExec) HasActorMethod(string, string) bool { return true }
func (*ctxExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return arg, nil
}
func (x *ctxExec) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return x, nil
}

func (x *ctxExec) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	switch method {
	case "look":
		if err := ctx.Err(); err != nil {
			return backend.Value{}, err
		}
		if got, _ := backend.RuntimeInfoFrom(ctx); got != info {
			return backend.Value{}, backend.Errorf(backend.Internal, "look", "RuntimeInfo %p, want %p", got, info)
		}
		// A reused record's info is this call's alone.
		if info.Task != "a.look" || info.Attempt != 0 || info.Node != "n" || info.Placement != (backend.Placement{Bundle: -1}) {
			return backend.Value{}, backend.Errorf(backend.Internal, "look", "RuntimeInfo %+v", *info)
		}
	case "keep":
		x.kept <- ctx
	case "pin":
		_ = ctx.Err()
		x.kept <- ctx
	case "spawn":
		x.wg.Go(func() {
			// Looks while later calls reuse records: either the call's
			// context as it was, or a cancelled one; -race checks the
			// record is not shared.
			if ctx.Err() == nil {
				if info, ok := backend.RuntimeInfoFrom(ctx); !ok || info.Task != "a.spawn" {
					panic("a live call context lost its RuntimeInfo")
				}
				select {
				case <-ctx.Done():
					panic("a live call context is done")
				default:
				}
			} else {
				<-ctx.Done()
			}
		})
	}
	return arg, nil
}

func newCtxRuntime(t *testing.T, x *ctxExec) (*Runtime, backend.ActorID) {
	is := is.New(t)
	ctx := context.Background()
	rt, err := New(NewStaticSource([]Node{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}), GoroutineRunner{}, Options{NativeValues: true})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, x))
	aid, err := rt.CreateActor(ctx, &backend.ActorSpec{Class: "a", MaxConcurrency: 1, Scheduling: backend.Scheduling{Placement: backend.Placement{Bundle: -1}}})
	is.NoErr(err)
	is.NoErr(rt.ActorReady(ctx, aid))
	return rt, aid
}

func callAndGet(t *testing.T, rt *Runtime, aid backend.ActorID, method string) {
	t.Helper()
	is := is.New(t)
	ctx := context.Background()
	id, err := rt.CallActor(ctx, &backend.CallSpec{Actor: aid, Class: "a", Method: method, Arg: backend.Arg{Value: backend.Value{Data: []byte("x")}}})
	is.NoErr(err)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "x")
	rt.Free(id)
}

// freeCall returns the record kept for reuse last, or nil.
func freeCall(rt *Runtime) *call {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if n := len(rt.freeCalls); n > 0 {
		return rt.freeCalls[n-1]
	}
	return nil
}

// TestCallRecordReused: a call whose code never looks at its context
// leaves its record, zeroed but for its lock and use number, for the next
// call, which takes it; a call whose code looks at it leaves nothing.
func TestCallRecordReused(t *testing.T) {
	is := is.New(t)
	x := &ctxExec{}
	rt, aid := newCtxRuntime(t, x)
	defer rt.Close()

	callAndGet(t, rt, aid, "m")
	cl := freeCall(rt)
	is.True(cl != nil)
	is.Equal(cl.gen, uint32(1))
	// What the next use overwrites before reading may stay.
	zeroBut(t, reflect.ValueOf(cl).Elem(), "", map[string]bool{"gen": true, "run0.lazyCancel.mu": true,
		"spec": true, "run0.Context": true, "run0.info": true, "run0.cl": true, "inflightIdx": true})

	callAndGet(t, rt, aid, "look") // takes cl, and pins it
	is.True(freeCall(rt) == nil)
	is.True(cl.pinned)
	is.Equal(cl.gen, uint32(1))
}

// zeroBut fails the test for every field of v not zero, but those named in
// skip (paths from the record, dotted).
func zeroBut(t *testing.T, v reflect.Value, path string, skip map[string]bool) {
	t.Helper()
	if skip[path] {
		return
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[backend.RuntimeInfo]() && v.Type() != reflect.TypeFor[backend.Value]() {
		for i := range v.NumField() {
			p := v.Type().Field(i).Name
			if path != "" {
				p = path + "." + p
			}
			zeroBut(t, v.Field(i), p, skip)
		}
		return
	}
	if !v.IsZero() {
		t.Errorf("field %s of a reused call record is not zero", path)
	}
}

// TestCallCtxStale: a context that the call's code kept without looking at
// it behaves, once the call has returned, as a cancelled context with no
// values; one it looked at while the call ran stays as it was.
func TestCallCtxStale(t *testing.T) {
	is := is.New(t)
	x := &ctxExec{kept: make(chan context.Context, 1)}
	rt, aid := newCtxRuntime(t, x)
	defer rt.Close()

	callAndGet(t, rt, aid, "keep")
	ctx := <-x.kept
	is.Equal(ctx.Err(), context.Canceled)
	<-ctx.Done()
	is.Equal(ctx.Value(backend.RuntimeInfoKey{}), nil)
	_, ok := ctx.Deadline()
	is.True(!ok)
	called := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(called) })
	<-called
	is.True(!stop())
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	<-derived.Done()

	// Looked at while the call ran: it stays the call's context after
	// the call returned (not reused), and ends with the actor.
	callAndGet(t, rt, aid, "pin")
	ctx = <-x.kept
	is.NoErr(ctx.Err())
	info, ok := backend.RuntimeInfoFrom(ctx)
	is.True(ok)
	is.Equal(info.Task, "a.pin")
	callAndGet(t, rt, aid, "m") // does not take the pinned record
	is.Equal(info.Task, "a.pin")
	is.NoErr(rt.KillActor(context.Background(), aid))
	<-ctx.Done()
	is.Equal(ctx.Err(), context.Canceled)
}

// TestCallCtxLookedAtAfterReturn: goroutines that calls started look at
// the calls' contexts while later calls reuse records; each sees its call's
// context or a cancelled one, never another call's (the goroutines check;
// -race checks that nothing is shared unguarded).
func TestCallCtxLookedAtAfterReturn(t *testing.T) {
	x := &ctxExec{}
	rt, aid := newCtxRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	for range 50 {
		ids := make([]backend.ObjectID, 0, 40)
		for i := range 40 {
			method := "m"
			if i%2 == 0 {
				method = "spawn"
			}
			id, err := rt.CallActor(ctx, &backend.CallSpec{Actor: aid, Class: "a", Method: method, Arg: backend.Arg{Value: backend.Value{Data: []byte("x")}}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			if _, err := rt.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			rt.Free(id)
		}
	}
	x.wg.Wait()
}
