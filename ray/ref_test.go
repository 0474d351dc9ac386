package ray_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

func TestZeroObjectRef(t *testing.T) {
	is := is.New(t)
	var r ray.ObjectRef[int]
	is.Equal(ray.CodeOf(r.Err()), ray.InvalidArgument)
	v, err := r.Get(context.Background())
	is.Equal(v, 0)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	is.True(strings.Contains(err.Error(), "zero ObjectRef"))
	is.Equal(r.ID(), backend.ObjectID(0))
	is.Equal(r.String(), "ObjectRef(invalid)")
	r.Release() // a no-op, not a panic
}

func TestObjectRefRelease(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, nil)
	t.Run("Get after Release", func(t *testing.T) {
		is := is.New(t)
		r := ray.Put(ctx, c, 5)
		v, err := r.Get(ctx)
		is.NoErr(err)
		is.Equal(v, 5)
		cp := r // copies share the ref
		r.Release()
		r.Release() // idempotent
		_, err = cp.Get(ctx)
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
		is.True(errors.Is(err, ray.ErrFailedPrecondition))
		is.True(strings.Contains(err.Error(), "released"))
		is.Equal(ray.CodeOf(r.Err()), ray.FailedPrecondition)
	})
	t.Run("released ref as a task input", func(t *testing.T) {
		is := is.New(t)
		r := ray.Put(ctx, c, 3)
		r.Release()
		out := regSquare.RemoteRef(ctx, c, r)
		is.Equal(ray.CodeOf(out.Err()), ray.FailedPrecondition)
		is.True(strings.Contains(out.Err().Error(), "input ref"))
	})
	t.Run("released ref counts as ready", func(t *testing.T) {
		is := is.New(t)
		r := ray.Put(ctx, c, 3)
		r.Release()
		ready, notReady, err := ray.Wait(ctx, []ray.ObjectRef[int]{r}, 1)
		is.NoErr(err)
		is.Equal(len(ready), 1)
		is.Equal(len(notReady), 0)
	})
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	c1 := localCluster(t, nil)
	c2 := localCluster(t, nil)
	t.Run("refs from two clusters", func(t *testing.T) {
		is := is.New(t)
		refs := []ray.ObjectRef[int]{ray.Put(ctx, c1, 1), ray.Put(ctx, c2, 2)}
		_, _, err := ray.Wait(ctx, refs, 2)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "different clusters"))
	})
	t.Run("refs of mixed types", func(t *testing.T) {
		is := is.New(t)
		a, b := ray.Put(ctx, c1, 1), ray.Put(ctx, c1, "two")
		ready, notReady, err := ray.Wait(ctx, []ray.Ref{a, b}, 2)
		is.NoErr(err)
		is.Equal(len(ready), 2)
		is.Equal(len(notReady), 0)
		is.Equal(ready[0].ID(), a.ID()) // input order
	})
	t.Run("failed submission counts as ready", func(t *testing.T) {
		is := is.New(t)
		var zero ray.ObjectRef[int]
		block := regUntilCanceled.Remote(ctx, c1, 0)
		ready, notReady, err := ray.Wait(ctx, []ray.ObjectRef[int]{block, zero}, 1)
		is.NoErr(err)
		is.Equal(len(ready), 1)
		is.Equal(ready[0].ID(), backend.ObjectID(0)) // the zero ref
		is.Equal(len(notReady), 1)
		is.Equal(notReady[0].ID(), block.ID())
	})
	t.Run("n is clamped", func(t *testing.T) {
		is := is.New(t)
		refs := []ray.ObjectRef[int]{ray.Put(ctx, c2, 1)}
		ready, _, err := ray.Wait(ctx, refs, 5)
		is.NoErr(err)
		is.Equal(len(ready), 1)
		ready, notReady, err := ray.Wait(ctx, refs, -1)
		is.NoErr(err)
		is.Equal(len(ready)+len(notReady), 1)
	})
	t.Run("context ends first", func(t *testing.T) {
		is := is.New(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		refs := []ray.ObjectRef[int]{regUntilCanceled.Remote(ctx, c2, 0)}
		ready, notReady, err := ray.Wait(cctx, refs, 1)
		is.Equal(err, context.Canceled) // unwrapped
		is.Equal(len(ready), 0)
		is.Equal(len(notReady), 1)
	})
}

func TestGetAll(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, nil)
	t.Run("values in order", func(t *testing.T) {
		is := is.New(t)
		var refs []ray.ObjectRef[int]
		for i := range 5 {
			refs = append(refs, regSquare.Remote(ctx, c, i))
		}
		got, err := ray.GetAll(ctx, refs)
		is.NoErr(err)
		is.Equal(got, []int{0, 1, 4, 9, 16})
	})
	t.Run("error names the index", func(t *testing.T) {
		is := is.New(t)
		refs := []ray.ObjectRef[int]{regCheck.Remote(ctx, c, 1), regCheck.Remote(ctx, c, -2), regCheck.Remote(ctx, c, -3)}
		got, err := ray.GetAll(ctx, refs)
		is.True(got == nil)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.True(strings.HasPrefix(err.Error(), "get objects: ref 1 of 3: ")) // the first failure in input order
		is.True(strings.Contains(err.Error(), "negative input -2"))
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.Equal(te.Task, "registrytest.check")
		is.Equal(te.Message, "negative input -2")
		is.True(!te.Panicked)
	})
	t.Run("zero ref", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.GetAll(ctx, []ray.ObjectRef[int]{ray.Put(ctx, c, 1), {}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "ref 1 of 2"))
	})
	t.Run("context error is returned as is", func(t *testing.T) {
		is := is.New(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := ray.GetAll(cctx, []ray.ObjectRef[int]{regUntilCanceled.Remote(ctx, c, 0)})
		is.Equal(err, context.Canceled)
	})
	t.Run("no refs", func(t *testing.T) {
		is := is.New(t)
		got, err := ray.GetAll[int](ctx, nil)
		is.NoErr(err)
		is.Equal(len(got), 0)
	})
}

func TestUnencodableValues(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, nil)
	t.Run("Put", func(t *testing.T) {
		is := is.New(t)
		r := ray.Put(ctx, c, make(chan int))
		is.Equal(ray.CodeOf(r.Err()), ray.InvalidArgument)
		is.True(strings.Contains(r.Err().Error(), "chan int"))
		is.True(strings.Contains(r.Err().Error(), "json"))
		_, err := r.Get(ctx)
		is.Equal(err, r.Err()) // Get reports the submission error
		is.Equal(r.ID(), backend.ObjectID(0))
	})
	t.Run("task input", func(t *testing.T) {
		is := is.New(t)
		r := regAny.Remote(ctx, c, func() {})
		is.Equal(ray.CodeOf(r.Err()), ray.InvalidArgument)
		is.True(strings.Contains(r.Err().Error(), "submit task registrytest.any"))
		is.True(strings.Contains(r.Err().Error(), "input"))
	})
	t.Run("task output", func(t *testing.T) {
		is := is.New(t)
		_, err := regBadOutput.Remote(ctx, c, 0).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.InvalidArgument) // a codec failure, not the user's TaskFailed
		is.True(strings.Contains(err.Error(), "output"))
	})
	t.Run("without the codec, values stay native", func(t *testing.T) {
		is := is.New(t)
		nc := localCluster(t, nil, &ray.Options{DisableCodec: true})
		ch := make(chan int)
		got, err := ray.Put(ctx, nc, ch).Get(ctx)
		is.NoErr(err)
		is.Equal(got, ch)
	})
}

func TestClosedAndNilCluster(t *testing.T) {
	ctx := context.Background()
	t.Run("nil cluster", func(t *testing.T) {
		is := is.New(t)
		var c *ray.Cluster
		is.Equal(ray.CodeOf(regSquare.Remote(ctx, c, 1).Err()), ray.InvalidArgument)
		is.Equal(ray.CodeOf(ray.Put(ctx, c, 1).Err()), ray.InvalidArgument)
		is.NoErr(c.Close())
		is.True(c.Backend() == nil)
	})
	t.Run("closed cluster", func(t *testing.T) {
		is := is.New(t)
		c := localCluster(t, nil)
		before := ray.Put(ctx, c, 1)
		is.NoErr(c.Close())
		is.NoErr(c.Close()) // idempotent
		for _, err := range []error{
			regSquare.Remote(ctx, c, 1).Err(),
			ray.Put(ctx, c, 1).Err(),
			func() error { _, err := before.Get(ctx); return err }(),
		} {
			is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
			is.True(errors.Is(err, ray.ErrClosed))
		}
	})
}

func TestResourceOptionsMerge(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, []local.NodeSpec{{Name: "host", Resources: backend.Resources{backend.CPU: 4, backend.TPU: 4, "custom": 2}}})
	tests := []struct {
		name string
		opts []ray.TaskOption
		want ray.Resources
	}{
		{"default is 1 CPU", nil, ray.Resources{ray.CPU: 1}},
		{"TPU keeps CPU 1", []ray.TaskOption{ray.Resources{ray.TPU: 4}}, ray.Resources{ray.CPU: 1, ray.TPU: 4}},
		{"CPU 0 asks for nothing", []ray.TaskOption{ray.Resources{ray.CPU: 0}}, ray.Resources{}},
		{"CPU and custom", []ray.TaskOption{ray.Resources{ray.CPU: 2, "custom": 1}}, ray.Resources{ray.CPU: 2, "custom": 1}},
		{"options accumulate", []ray.TaskOption{ray.Resources{ray.TPU: 1}, ray.Resources{ray.CPU: 0.5}}, ray.Resources{ray.CPU: 0.5, ray.TPU: 1}},
		{"later option wins", []ray.TaskOption{ray.Resources{ray.CPU: 3}, ray.Resources{ray.CPU: 2}}, ray.Resources{ray.CPU: 2}},
		{"nil option is ignored", []ray.TaskOption{nil, ray.Resources{ray.TPU: 2}}, ray.Resources{ray.CPU: 1, ray.TPU: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got, err := regResources.Remote(ctx, c, 0, tt.opts...).Get(ctx)
			is.NoErr(err)
			is.Equal(got, tt.want)
		})
	}
	t.Run("the defaults are not shared", func(t *testing.T) {
		is := is.New(t)
		_, err := regResources.Remote(ctx, c, 0, ray.Resources{ray.CPU: 3}).Get(ctx)
		is.NoErr(err)
		got, err := regResources.Remote(ctx, c, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(got, ray.Resources{ray.CPU: 1}) // an earlier option did not change the default
	})
	t.Run("negative amount", func(t *testing.T) {
		is := is.New(t)
		err := regResources.Remote(ctx, c, 0, ray.Resources{ray.TPU: -1}).Err()
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), `"TPU"`))
	})
	t.Run("TPU chip counts as in Ray", func(t *testing.T) {
		is := is.New(t)
		for _, bad := range []float64{0.5, 3, 6, 16} {
			err := regResources.Remote(ctx, c, 0, ray.Resources{ray.TPU: bad}).Err()
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			is.True(strings.Contains(err.Error(), "valid: 1, 2, 4 or 8 chips of one host")) // says what is valid
			err = benchActorClass.Remote(ctx, c, struct{}{}, ray.Resources{ray.TPU: bad}).Ready(ctx)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument) // actors too
		}
	})
	t.Run("unknown resource is infeasible", func(t *testing.T) {
		is := is.New(t)
		err := regResources.Remote(ctx, c, 0, ray.Resources{"GPU": 1}).Err()
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(strings.Contains(err.Error(), `"GPU"`))
	})
}

func TestActorResourceOptions(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, []local.NodeSpec{{Name: "host", Resources: backend.Resources{backend.CPU: 4, backend.TPU: 4}}})
	tests := []struct {
		name string
		opts []ray.ActorOption
		want ray.Resources
	}{
		{"default is nothing", nil, ray.Resources{}},
		{"TPU alone", []ray.ActorOption{ray.Resources{ray.TPU: 2}}, ray.Resources{ray.TPU: 2}},
		{"options accumulate", []ray.ActorOption{ray.Resources{ray.CPU: 1}, ray.Resources{ray.TPU: 1}}, ray.Resources{ray.CPU: 1, ray.TPU: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			h := regResActor.Remote(ctx, c, 0, tt.opts...)
			defer h.Kill(ctx)
			got, err := regCtorResources.Remote(ctx, h, struct{}{}).Get(ctx)
			is.NoErr(err)
			is.Equal(got, tt.want) // the constructor sees the actor's resources
		})
	}
}

func TestActorCallSeesGrantedResources(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c := localCluster(t, []local.NodeSpec{{Name: "host", Resources: backend.Resources{backend.CPU: 4, backend.TPU: 4}}})
	h := regResActor.Remote(ctx, c, 0, ray.Resources{ray.TPU: 2})
	defer h.Kill(ctx)
	got, err := regCallResources.Remote(ctx, h, struct{}{}).Get(ctx)
	is.NoErr(err)
	is.Equal(got, ray.Resources{ray.TPU: 2})
}
