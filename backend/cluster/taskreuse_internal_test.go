package cluster

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// infoStarter is a starterExec that also records each start's context and
// a copy of its RuntimeInfo and input, and can look at the context
// (touch) before it keeps it.
type infoStarter struct {
	starterExec
	touch func(ctx context.Context)
	imu   sync.Mutex
	ctxs  []context.Context
	infos []backend.RuntimeInfo
	args  []string
}

func (x *infoStarter) StartTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo, done backend.TaskDone) bool {
	if x.touch != nil {
		x.touch(ctx)
	}
	x.imu.Lock()
	x.ctxs = append(x.ctxs, ctx)
	x.infos = append(x.infos, *info)
	x.args = append(x.args, string(arg.Data))
	x.imu.Unlock()
	return x.starterExec.StartTask(ctx, name, arg, info, done)
}

func freeTasks(rt *Runtime) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.freeTasks)
}

// TestTaskRecordReused: the records of tasks a TaskStarter started and
// finished through TaskDone are kept and given to the next tasks, which
// run with their own spec, input, RuntimeInfo and result, as tasks with
// new records do.
func TestTaskRecordReused(t *testing.T) {
	is := is.New(t)
	x := &infoStarter{}
	rt, held := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	submit := func(spec *backend.TaskSpec, in string) backend.ObjectID {
		id, err := rt.SubmitTaskArg(ctx, spec, backend.Arg{Value: backend.Value{Data: []byte(in)}})
		is.NoErr(err)
		return id
	}
	first := []backend.ObjectID{submit(claimSpec(0), "a"), submit(claimSpec(0), "b"), submit(claimSpec(0), "c")}
	is.Equal(held.runAll(), 0)
	is.Equal(x.finishAll(backend.Value{Data: []byte("one")}), 3)
	for _, id := range first {
		v, err := rt.Get(ctx, id)
		is.NoErr(err)
		is.Equal(string(v.Data), "one")
		rt.Free(id)
	}
	is.Equal(freeTasks(rt), 3)
	old := slices.Clone(x.ctxs)

	// Another task, with other resources, reuses a record.
	other := &backend.TaskSpec{Name: "u", Scheduling: backend.Scheduling{
		Resources: backend.Resources{backend.CPU: 2}, Placement: backend.Placement{Bundle: -1}}}
	id := submit(other, "d")
	is.Equal(freeTasks(rt), 2)
	is.True(slices.Contains(old, x.ctxs[3])) // the same record, its context in it
	is.Equal(x.args[3], "d")
	got, want := x.infos[3], *rt.runtimeInfo("u", 0, rt.nodes[0], nil, 0, rt.lastSpecClass)
	is.Equal(got, want) // as a new record's
	is.Equal(got.Task, "u")
	is.Equal(got.Resources[backend.CPU], 2.0)
	is.NoErr(x.ctxs[3].Err())
	is.Equal(x.finishAll(backend.Value{Data: []byte("two")}), 1)
	v, err := rt.Get(ctx, id)
	is.NoErr(err)
	is.Equal(string(v.Data), "two")
	w := counted(rt)
	is.Equal(w.Submitted, uint64(3))
	is.Equal(w.Finished, uint64(3))
	rt.mu.Lock()
	is.Equal(rt.running, 0)
	rt.mu.Unlock()
}

// TestReusedTaskRecordLeavesItsGroup: a record whose last task ran in a
// placement group's bundle, reused for a task outside any group, gives
// that task a RuntimeInfo with no group (as a new record's), and the
// other way round.
func TestReusedTaskRecordLeavesItsGroup(t *testing.T) {
	is := is.New(t)
	x := &infoStarter{}
	rt, _ := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	pg, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack,
		Bundles: []backend.Bundle{{Resources: backend.Resources{backend.CPU: 1}}}})
	is.NoErr(err)
	is.NoErr(rt.PlacementGroupReady(ctx, pg))
	inGroup := &backend.TaskSpec{Name: "g", Scheduling: backend.Scheduling{
		Resources: backend.Resources{backend.CPU: 1}, Placement: backend.Placement{Group: pg, Bundle: 0}}}
	run := func(spec *backend.TaskSpec) backend.RuntimeInfo {
		t.Helper()
		id, err := rt.SubmitTaskArg(ctx, spec, backend.Arg{})
		is.NoErr(err)
		is.Equal(x.finishAll(backend.Value{}), 1)
		_, err = rt.Get(ctx, id)
		is.NoErr(err)
		rt.Free(id)
		is.Equal(freeTasks(rt), 1) // this record goes back, to be the next one's
		return x.infos[len(x.infos)-1]
	}
	info := run(inGroup)
	is.Equal(info.Placement, backend.Placement{Group: pg, Bundle: 0})
	info = run(claimSpec(0))
	is.Equal(info.Placement, backend.Placement{Bundle: -1}) // not the group of the record's last task
	is.Equal(info, *rt.runtimeInfo("t", 0, rt.nodes[0], nil, 0, rt.lastSpecClass))
	info = run(inGroup)
	is.Equal(info.Placement, backend.Placement{Group: pg, Bundle: 0})
}

// TestTaskRecordNotReused: a record that code may still reach is never
// reused: a task run in this process (its context is the task code's), a
// started task whose context the starter looked at (a Done channel) or
// watched without stopping, one cancelled, one retried.
func TestTaskRecordNotReused(t *testing.T) {
	ctx := context.Background()
	run := func(t *testing.T, x backend.Executor, spec *backend.TaskSpec, finish func(rt *Runtime, held *heldPool, id backend.ObjectID)) {
		t.Helper()
		is := is.New(t)
		rt, held := heldRuntime(t, x)
		defer rt.Close()
		id, err := rt.SubmitTaskArg(ctx, spec, backend.Arg{Value: backend.Value{Data: []byte("in")}})
		is.NoErr(err)
		finish(rt, held, id)
		rt.Get(ctx, id) //nolint:errcheck // done either way
		is.Equal(freeTasks(rt), 0)
	}
	finishStarted := func(x *infoStarter) func(*Runtime, *heldPool, backend.ObjectID) {
		return func(*Runtime, *heldPool, backend.ObjectID) { x.finishAll(backend.Value{}) }
	}

	t.Run("run in this process", func(t *testing.T) {
		run(t, &claimExec{}, claimSpec(0), func(_ *Runtime, held *heldPool, _ backend.ObjectID) { held.runAll() })
	})
	t.Run("the starter refused it", func(t *testing.T) {
		x := &infoStarter{}
		x.refuse = true
		run(t, x, claimSpec(0), func(_ *Runtime, held *heldPool, _ backend.ObjectID) { held.runAll() })
	})
	t.Run("its Done channel made", func(t *testing.T) {
		x := &infoStarter{touch: func(ctx context.Context) { _ = ctx.Done() }}
		run(t, x, claimSpec(0), finishStarted(x))
	})
	t.Run("a watch not stopped", func(t *testing.T) {
		x := &infoStarter{touch: func(ctx context.Context) { context.AfterFunc(ctx, func() {}) }}
		run(t, x, claimSpec(0), finishStarted(x))
	})
	t.Run("cancelled", func(t *testing.T) {
		x := &infoStarter{}
		run(t, x, claimSpec(0), func(rt *Runtime, _ *heldPool, id backend.ObjectID) {
			if err := rt.CancelTask(ctx, id, backend.CancelOptions{}); err != nil {
				t.Fatal(err)
			}
			x.finishAll(backend.Value{}) // the late result of the cancelled run
		})
	})
	t.Run("retried", func(t *testing.T) {
		x := &infoStarter{}
		run(t, x, claimSpec(1), func(*Runtime, *heldPool, backend.ObjectID) {
			x.mu.Lock()
			first := x.started
			x.started = nil
			x.mu.Unlock()
			first[0].TaskDone(backend.Value{}, backend.Errorf(backend.TaskFailed, "t", "%w", errors.New("once")))
			x.finishAll(backend.Value{}) // the retry
		})
	})
}

// TestReusedTaskIsAsNew: every field of a task record (and of its first
// attempt's context) is either set by each use before it is read, or is
// as in a new record when newTask hands a reused record out. A field
// added to the record must be added here, with how a reuse treats it.
func TestReusedTaskIsAsNew(t *testing.T) {
	is := is.New(t)
	// How each field is treated between uses.
	const (
		setByUse = "set by each use before it is read"
		zero     = "zero when handed out again"
		kept     = "kept across uses"
	)
	fields := map[string]string{
		"obj": zero, "spec": setByUse, "ext": zero, "arg": zero, "dep": zero, "cls": setByUse, "seq": setByUse,
		"attempt": zero, "node": zero, "bundle": zero, "nodeIdx": setByUse, "bundleIdx": setByUse, "bypass": zero,
		"state": zero,
		// fillRuntimeInfo sets every field of the info
		// (TestReusedTaskRecordLeavesItsGroup).
		"ctx0.info": setByUse, "ctx0.b": setByUse, "ctx0.t": setByUse, "ctx0.attempt": setByUse,
		"ctx0.lazyCancel.mu": zero, "ctx0.lazyCancel.done": zero, "ctx0.lazyCancel.one": zero,
		// The watch numbers only grow, so a stale StopAfterFunc of an
		// earlier use stops nothing of a later one.
		"ctx0.lazyCancel.oneID":  kept,
		"ctx0.lazyCancel.afters": zero, "ctx0.lazyCancel.cause": zero, "ctx0.lazyCancel.forced": zero,
		"ctx0.lazyCancel.claimed": zero,
	}
	x := &infoStarter{}
	rt, _ := heldRuntime(t, x)
	defer rt.Close()
	ctx := context.Background()
	id, err := rt.SubmitTaskArg(ctx, claimSpec(0), backend.Arg{Value: backend.Value{Data: []byte("in")}})
	is.NoErr(err)
	is.Equal(x.finishAll(backend.Value{Data: []byte("out")}), 1)
	_, err = rt.Get(ctx, id)
	is.NoErr(err)
	rt.mu.Lock()
	rec := rt.newTask()
	rt.mu.Unlock()
	is.Equal(&rec.ctx0, x.ctxs[0]) // the record used before

	seen := 0
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name := prefix + f.Name
			if f.Name == "ctx0" || f.Name == "lazyCancel" {
				walk(name+".", v.Field(i))
				continue
			}
			how, ok := fields[name]
			if !ok {
				t.Errorf("field %s of a task record: say in this test how a reused record treats it (and make reuseTask or newTask do so)", name)
				continue
			}
			seen++
			if how == zero && !v.Field(i).IsZero() {
				t.Errorf("field %s of a reused task record is not zero when handed out again", name)
			}
		}
	}
	walk("", reflect.ValueOf(rec).Elem())
	is.Equal(seen, len(fields)) // no field listed here is gone from the record
}

// junk sets every field of v, recursively, to a value that is not its
// zero value.
func junk(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("junk")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		junk(t, k)
		junk(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			junk(t, v.Field(i))
		}
	default:
		t.Fatalf("junk: a field of kind %v: teach junk to fill it", v.Kind())
	}
}

// TestFillRuntimeInfoSetsEveryField: a task's RuntimeInfo filled on a
// reused record (every field holding something else) is the same as one
// filled on a new record: fillRuntimeInfo leaves no field of an earlier
// task's info behind, including fields added to RuntimeInfo later.
func TestFillRuntimeInfoSetsEveryField(t *testing.T) {
	is := is.New(t)
	rt, _ := heldRuntime(t, &infoStarter{})
	defer rt.Close()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c, err := rt.classFor("submit task", &claimSpec(0).Scheduling)
	is.NoErr(err)
	var used backend.RuntimeInfo
	junk(t, reflect.ValueOf(&used).Elem())
	rt.fillRuntimeInfo(&used, "t", 0, rt.nodes[0], nil, 0, c)
	var fresh backend.RuntimeInfo
	rt.fillRuntimeInfo(&fresh, "t", 0, rt.nodes[0], nil, 0, c)
	is.Equal(used, fresh)
}
