package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// TestResubmittedSpecRechecked: one spec submitted again skips the checks
// it passed, but not once the nodes changed: the node its resource was on
// is gone, so the next submission of the very same spec is Infeasible, and
// feasible again once the node is back.
func TestResubmittedSpecRechecked(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	nodes := []cluster.Node{
		{Name: "plain", Resources: backend.Resources{backend.CPU: 4}},
		{Name: "special", Resources: backend.Resources{backend.CPU: 4, "special": 1}},
	}
	src := newTestSource(t, nodes)
	rt, err := cluster.New(src, &lostRunner{}, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, countExec{}))
	defer rt.Close()

	spec := &backend.TaskSpec{Name: "ok", Scheduling: backend.Scheduling{Resources: backend.Resources{"special": 1}, Placement: backend.Placement{Bundle: -1}}}
	submit := func() error {
		id, err := rt.SubmitTaskArg(ctx, spec, backend.Arg{})
		if err == nil {
			// A task queued for a node that never comes ends the wait.
			gctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err = rt.Get(gctx, id)
			rt.Free(id)
		}
		return err
	}
	is.NoErr(submit())
	is.NoErr(submit()) // the same spec again
	is.NoErr(rt.KillNode(ctx, "special"))
	is.Equal(backend.CodeOf(submit()), backend.Infeasible)
	is.Equal(backend.CodeOf(submit()), backend.Infeasible)
	is.NoErr(src.Restore(ctx, "special"))
	is.NoErr(submit())

	other := &backend.TaskSpec{Name: "nope", Scheduling: spec.Scheduling}
	_, err = rt.SubmitTaskArg(ctx, other, backend.Arg{})
	is.Equal(backend.CodeOf(err), backend.NotFound) // another spec is checked
	is.NoErr(submit())
}
