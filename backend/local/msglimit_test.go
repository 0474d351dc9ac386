package local_test

import (
	"context"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

var (
	limitEcho  = ray.NewTask("localtest.limitEcho", func(ctx context.Context, s string) (string, error) { return s, nil })
	limitGrow  = ray.NewTask("localtest.limitGrow", func(ctx context.Context, n int) (string, error) { return strings.Repeat("x", n), nil })
	limitActor = ray.NewActorClass("localtest.limitActor", func(ctx context.Context, _ int) (*struct{}, error) { return &struct{}{}, nil })
	limitCall  = ray.NewMethod(limitActor, "echo", func(ctx context.Context, _ *struct{}, s string) (string, error) { return s, nil })
)

// TestInProcessMessageLimit: the in-process mode refuses values larger
// than the message-size limit as worker processes do, with the same error.
func TestInProcessMessageLimit(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "n", Resources: backend.Resources{backend.CPU: 4}}}},
		&local.Options{MaxMessageSize: 64 << 10})
	is.NoErr(err)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	big := strings.Repeat("x", 100<<10)
	tooLarge := func(err error, what string) {
		t.Helper()
		is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
		is.True(strings.Contains(err.Error(), "exceeds the limit of 64.0 KiB")) // worded as on the wire
		is.True(strings.Contains(err.Error(), what))                            // names what was too large
	}
	_, err = limitEcho.Remote(ctx, c, big).Get(ctx)
	tooLarge(err, "input of task localtest.limitEcho")
	_, err = limitGrow.Remote(ctx, c, 100<<10).Get(ctx)
	tooLarge(err, "output of task localtest.limitGrow")
	h := limitActor.Remote(ctx, c, 0)
	_, err = limitCall.Remote(ctx, h, big).Get(ctx)
	tooLarge(err, "input of localtest.limitActor.echo")
	v, err := limitCall.Remote(ctx, h, "small").Get(ctx) // the actor still serves
	is.NoErr(err)
	is.Equal(v, "small")
	v, err = limitEcho.Remote(ctx, c, "small").Get(ctx)
	is.NoErr(err)
	is.Equal(v, "small")
}
