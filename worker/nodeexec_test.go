package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// describing is a local executor that knows one task and describes its
// registry.
type describing struct{ backend.Executor }

func (describing) HasTask(name string) bool            { return name == "t" }
func (describing) HasActorMethod(class, m string) bool { return class == "A" }
func (describing) WorkerManifest() Manifest            { return Manifest{Codec: "json"} }

// TestNodeExecutor: work goes to the worker of its node; a worker that
// cannot be had fails the work with the runner's error; registrations and
// the manifest are the local executor's.
func TestNodeExecutor(t *testing.T) {
	is := is.New(t)
	var asked []string
	refused := errors.New("node n1's worker cannot start")
	x := NodeExecutor{Local: describing{}, Worker: func(ctx context.Context, node string) (*Client, func(), error) {
		asked = append(asked, node)
		return nil, nil, refused
	}}
	_, err := x.RunTask(t.Context(), "t", backend.Value{}, &backend.RuntimeInfo{Node: "n1"})
	is.True(errors.Is(err, refused))
	_, err = x.NewActor(t.Context(), "A", backend.Value{}, &backend.RuntimeInfo{Node: "n2"})
	is.True(errors.Is(err, refused))
	is.Equal(asked, []string{"n1", "n2"})
	is.True(x.HasTask("t") && !x.HasTask("u"))
	is.True(x.HasActorMethod("A", "m"))
	is.Equal(x.WorkerManifest().Codec, "json")
}

// TestNodeExecutorStartTask: StartTask sends to the node's connected worker
// (releasing it when the task is done); when none is connected, or
// without Connected, it returns false without calling done, for the
// backend to use RunTask.
func TestNodeExecutorStartTask(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	released := make(chan string, 2)
	x := NodeExecutor{Local: describing{},
		Worker: func(ctx context.Context, node string) (*Client, func(), error) {
			return nil, nil, errors.New("StartTask must not wait for a worker")
		},
		Connected: func(node string) (*Client, func()) {
			if node == "connected" {
				return c, func() { released <- node }
			}
			return nil, nil
		},
	}
	res := make(chan startResult, 2)
	returned := make(chan struct{})
	done := doneFunc(func(v backend.Value, err error) {
		<-returned
		res <- startResult{v, err}
	})
	is.True(x.StartTask(t.Context(), "echo", backend.Value{Data: []byte("hi")}, &backend.RuntimeInfo{Node: "connected"}, done))
	close(returned)
	got := <-res
	is.NoErr(got.err)
	is.Equal(string(got.v.Data), "hi")
	is.Equal(<-released, "connected")

	is.True(!x.StartTask(t.Context(), "echo", backend.Value{}, &backend.RuntimeInfo{Node: "starting"}, done))
	x.Connected = nil
	is.True(!x.StartTask(t.Context(), "echo", backend.Value{}, &backend.RuntimeInfo{Node: "connected"}, done))
	is.Equal(len(res), 0) // done was not called
	is.Equal(len(released), 0)
}

// TestNodeExecutorStartTaskHeld: a done that can hold its waiters' wake-up
// (backend.TaskDoneHolder) gets its result held through the release
// wrapper, which releases the worker first, and the reader flushes it.
func TestNodeExecutorStartTaskHeld(t *testing.T) {
	is := is.New(t)
	addr, _ := startServer(t, nil)
	c := dialTest(t, addr, nil)
	released := make(chan struct{}, 1)
	x := NodeExecutor{Local: describing{},
		Connected: func(node string) (*Client, func()) {
			return c, func() { released <- struct{}{} }
		},
	}
	rec := &flushRec{want: 1, all: make(chan struct{})}
	all := rec.all
	is.True(x.StartTask(t.Context(), "echo", backend.Value{Data: []byte("hi")}, &backend.RuntimeInfo{Node: "n"}, holderDone{rec}))
	select {
	case <-all: // delivered held, then flushed
	case <-time.After(time.Minute):
		t.Fatal("the held result was not flushed")
	}
	<-released
	rec.mu.Lock()
	defer rec.mu.Unlock()
	is.Equal(rec.plain, 0)
	is.Equal(rec.held, 1)
}
