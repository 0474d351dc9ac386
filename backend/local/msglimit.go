package local

import (
	"context"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/worker"
)

// limitExecutor enforces, in the in-process mode, the message-size limit
// that worker processes enforce on the wire: an encoded input or output
// larger than the limit fails its task or call with ResourceExhausted, as
// it would on a cluster, instead of only there.
type limitExecutor struct {
	backend.Executor
	limit int
}

func (e *limitExecutor) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if err := worker.CheckMessageSize(len(arg.Data), e.limit); err != nil {
		return backend.Value{}, wrapLimit("input of task "+name, err)
	}
	v, err := e.Executor.RunTask(ctx, name, arg, info)
	if err == nil {
		if err := worker.CheckMessageSize(len(v.Data), e.limit); err != nil {
			return backend.Value{}, wrapLimit("output of task "+name, err)
		}
	}
	return v, err
}

func (e *limitExecutor) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	if err := worker.CheckMessageSize(len(arg.Data), e.limit); err != nil {
		return nil, wrapLimit("input of actor "+class, err)
	}
	inst, err := e.Executor.NewActor(ctx, class, arg, info)
	if err != nil {
		return nil, err
	}
	return &limitInstance{ActorInstance: inst, class: class, limit: e.limit}, nil
}

type limitInstance struct {
	backend.ActorInstance
	class string
	limit int
}

func (a *limitInstance) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if err := worker.CheckMessageSize(len(arg.Data), a.limit); err != nil {
		return backend.Value{}, wrapLimit("input of "+a.class+"."+method, err)
	}
	v, err := a.ActorInstance.Call(ctx, method, arg, info)
	if err == nil {
		if err := worker.CheckMessageSize(len(v.Data), a.limit); err != nil {
			return backend.Value{}, wrapLimit("output of "+a.class+"."+method, err)
		}
	}
	return v, err
}

func wrapLimit(what string, err error) error {
	return backend.Reop(backend.ResourceExhausted, what, err)
}
