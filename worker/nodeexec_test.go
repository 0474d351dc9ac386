package worker

import (
	"context"
	"errors"
	"testing"

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
