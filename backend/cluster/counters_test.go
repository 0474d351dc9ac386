package cluster_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// countExec runs tasks "ok" (a value) and "fail" (an error), and actor
// class "counter" whose method "ok" answers and "fail" fails.
type countExec struct{}

func (countExec) HasTask(name string) bool { return name == "ok" || name == "fail" }
func (countExec) HasActorMethod(class, method string) bool {
	return class == "counter" && (method == "" || method == "ok" || method == "fail")
}
func (countExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if name == "fail" {
		return backend.Value{}, errors.New("failed on purpose")
	}
	return backend.Value{Data: []byte("ok")}, nil
}
func (countExec) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return countActor{}, nil
}

type countActor struct{}

func (countActor) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if method == "fail" {
		return backend.Value{}, errors.New("failed on purpose")
	}
	return backend.Value{Data: []byte("ok")}, nil
}

// lostRunner runs work in process and lets a test report a node's
// worker lost.
type lostRunner struct {
	mu   sync.Mutex
	lost cluster.LostFunc
}

func (r *lostRunner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = lost
	return exec, nil
}
func (r *lostRunner) NodeUp(ctx context.Context, n cluster.Node) error { return nil }
func (r *lostRunner) NodeDown(name string)                             {}
func (r *lostRunner) Close() error                                     { return nil }

// The counters count tasks and actor calls per name as submitted,
// finished and failed (retries spent), worker restarts, and how long
// granted slice reservations waited.
func TestCounters(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	nodes := append(tpuHosts(1), cluster.Node{Name: "cpu0", Resources: backend.Resources{backend.CPU: 4}})
	runner := &lostRunner{}
	rt, err := cluster.New(newTestSource(t, nodes), runner, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, countExec{}))
	defer rt.Close()

	var ids []backend.ObjectID
	for _, name := range []string{"ok", "ok", "ok", "fail"} {
		id, err := rt.SubmitTask(ctx, &backend.TaskSpec{Name: name, DisplayName: name + "-shown",
			MaxRetries: 2, RetryOnError: true, Scheduling: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1}, Placement: backend.Placement{Bundle: -1}}})
		is.NoErr(err)
		ids = append(ids, id)
	}
	_, err = rt.SubmitTask(ctx, &backend.TaskSpec{Name: "ok", Arg: backend.Arg{Ref: 1 << 40}})
	is.True(err != nil) // an unknown input: not submitted, not counted
	actor, err := rt.CreateActor(ctx, &backend.ActorSpec{Class: "counter", Scheduling: backend.Scheduling{Placement: backend.Placement{Bundle: -1}}})
	is.NoErr(err)
	is.NoErr(rt.ActorReady(ctx, actor))
	for _, m := range []string{"ok", "fail", "fail"} {
		id, err := rt.CallActor(ctx, &backend.CallSpec{Actor: actor, Class: "counter", Method: m})
		is.NoErr(err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		rt.Get(ctx, id) //nolint:errcheck // some fail on purpose
	}
	r, err := rt.ReserveSlices(ctx, request("train"))
	is.NoErr(err)
	defer rt.RemovePlacementGroup(ctx, r.Group)
	runner.mu.Lock()
	runner.lost("cpu0", cluster.Restarting(errors.New("worker crashed")))
	runner.mu.Unlock()

	snap, err := rt.Snapshot(ctx)
	is.NoErr(err)
	c := snap.Counters
	is.True(c != nil)
	is.Equal(c.Work, []backend.WorkCount{
		{Name: "counter.fail", Submitted: 2, Failed: 2},
		{Name: "counter.ok", Submitted: 1, Finished: 1},
		{Name: "fail", Submitted: 1, Failed: 1}, // three attempts, one failure
		{Name: "ok", Submitted: 3, Finished: 3},
	})
	is.Equal(c.WorkerRestarts, uint64(1))
	is.Equal(c.SliceReservationWait.Count, uint64(1))
	is.Equal(len(c.SliceReservationWait.Counts), len(backend.WaitBuckets)+1)
}

// Past MaxCountedNames names, work counts under OtherWorkName.
func TestCountersBounded(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	rt, err := cluster.New(newTestSource(t, tpuHosts(1)), &lostRunner{}, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, anyTask{}))
	defer rt.Close()
	var ids []backend.ObjectID
	for i := range backend.MaxCountedNames + 5 {
		id, err := rt.SubmitTask(ctx, &backend.TaskSpec{Name: "t" + strconv.Itoa(i), Scheduling: backend.Scheduling{Placement: backend.Placement{Bundle: -1}}})
		is.NoErr(err)
		ids = append(ids, id)
	}
	for _, id := range ids {
		_, err := rt.Get(ctx, id)
		is.NoErr(err)
	}
	snap, err := rt.Snapshot(ctx)
	is.NoErr(err)
	is.Equal(len(snap.Counters.Work), backend.MaxCountedNames+1)
	var other backend.WorkCount
	for _, w := range snap.Counters.Work {
		if w.Name == backend.OtherWorkName {
			other = w
		}
	}
	is.Equal(other, backend.WorkCount{Name: backend.OtherWorkName, Submitted: 5, Finished: 5})
}
