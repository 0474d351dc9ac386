package cluster

import (
	"context"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// gateExec runs tasks named "wait" until their input's gate opens, and
// records the order in which tasks finish.
type gateExec struct {
	echoExec
	gates map[string]chan struct{}
	mu    sync.Mutex
	order []string
}

func (g *gateExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if ch := g.gates[string(arg.Data)]; ch != nil {
		<-ch
	}
	g.mu.Lock()
	g.order = append(g.order, string(arg.Data))
	g.mu.Unlock()
	return arg, nil
}

// TestLargeRequestNotStarved: a request for a whole node, queued behind
// running work, is overtaken by at most StarvationLimit younger small
// requests; then the scheduler holds the node back for it, and it runs
// before the rest of the small ones.
func TestLargeRequestNotStarved(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	const limit, small = 2, 12
	ex := &gateExec{gates: map[string]chan struct{}{}}
	for _, g := range []string{"b0", "b1", "b2", "b3"} {
		ex.gates[g] = make(chan struct{})
	}
	rt, err := New(NewStaticSource([]Node{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}), GoroutineRunner{}, Options{NativeValues: true, StarvationLimit: limit})
	is.NoErr(err)
	is.NoErr(rt.Start(ctx, ex))
	defer rt.Close()
	submit := func(in string, cpu float64) backend.ObjectID {
		id, err := rt.SubmitTask(ctx, &backend.TaskSpec{Name: "t", Arg: backend.Arg{Value: backend.Value{Data: []byte(in)}},
			Scheduling: backend.Scheduling{Resources: backend.Resources{backend.CPU: cpu}, Placement: backend.Placement{Bundle: -1}}})
		is.NoErr(err)
		return id
	}
	for _, g := range []string{"b0", "b1", "b2", "b3"} {
		submit(g, 1) // the node is full
	}
	large := submit("large", 4)
	var ids []backend.ObjectID
	for i := range small {
		ids = append(ids, submit(string(rune('a'+i)), 1))
	}
	for _, g := range []string{"b0", "b1", "b2", "b3"} {
		close(ex.gates[g]) // each frees a CPU a small request may take
	}
	_, err = rt.Get(ctx, large)
	is.NoErr(err)
	for _, id := range ids {
		_, err := rt.Get(ctx, id)
		is.NoErr(err)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	pos := -1
	for i, s := range ex.order {
		if s == "large" {
			pos = i
		}
	}
	is.True(pos >= 0)
	overtook := pos - 4          // finished before it, besides the four it waited for
	is.True(overtook <= limit+1) // not starved by the stream of small requests
	is.True(len(ex.order)-pos-1 >= small-limit-1)
}
