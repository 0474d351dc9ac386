package ray

import (
	"context"
	"maps"

	"github.com/goray-dev/goray/backend"
)

func withRuntime(ctx context.Context, info *backend.RuntimeInfo) context.Context {
	if info == nil {
		return ctx
	}
	if c, ok := ctx.(runtimeInfoCarrier); ok && c.CarriesRuntimeInfo(info) {
		return ctx // the backend's context carries it, and asking it costs less than Value
	}
	if cur, _ := backend.RuntimeInfoFrom(ctx); cur == info {
		return ctx // the backend's context already carries it
	}
	return context.WithValue(ctx, backend.RuntimeInfoKey{}, info)
}

// runtimeInfoCarrier is a backend's context that tells whether it carries
// a RuntimeInfo without being asked for its values (backend/cluster's actor
// call context: asking for a value marks the context as used, and its
// record as one not to reuse).
type runtimeInfoCarrier interface {
	CarriesRuntimeInfo(info *backend.RuntimeInfo) bool
}

// RuntimeContext tells running task or actor code where it runs. Obtain it
// with [Runtime]. The zero value (outside any task) reports empty values.
// It is safe for concurrent use.
type RuntimeContext struct{ info *backend.RuntimeInfo }

// Runtime returns the runtime context of the task or actor call that ctx
// belongs to; ok is false outside of goray work.
func Runtime(ctx context.Context) (rc RuntimeContext, ok bool) {
	info, ok := backend.RuntimeInfoFrom(ctx)
	return RuntimeContext{info: info}, ok
}

func (r RuntimeContext) get() *backend.RuntimeInfo {
	if r.info == nil {
		return &backend.RuntimeInfo{}
	}
	return r.info
}

// TaskName is the registered task name, "class.method" for an actor call, or
// the class name in a constructor.
func (r RuntimeContext) TaskName() string { return r.get().Task }

// Attempt is the 0-based attempt number (retries and restarts count up).
func (r RuntimeContext) Attempt() int { return r.get().Attempt }

// NodeName is the name of the node the work runs on.
func (r RuntimeContext) NodeName() string { return r.get().Node }

// NodeLabels returns a copy of the node's labels.
func (r RuntimeContext) NodeLabels() map[string]string { return maps.Clone(r.get().NodeLabels) }

// Resources returns a copy of the resources granted to the work.
func (r RuntimeContext) Resources() Resources { return Resources(r.get().Resources.Clone()) }

// PlacementGroupID is the placement group the work runs in, or 0.
func (r RuntimeContext) PlacementGroupID() PlacementGroupID {
	return r.get().Placement.Group
}

// BundleIndex is the placement group bundle the work runs in, or -1.
func (r RuntimeContext) BundleIndex() int {
	if r.get().Placement.Group == 0 {
		return -1
	}
	return r.get().Placement.Bundle
}

// Env returns the value of an environment variable of the work: TPU workers
// read TPU_WORKER_ID and friends here. The work's env is the node's env plus
// its placement group bundle's env; it is not the process environment.
func (r RuntimeContext) Env(key string) string { return r.get().Env[key] }

// Environ returns a copy of the work's whole env.
func (r RuntimeContext) Environ() map[string]string { return maps.Clone(r.get().Env) }

// ActorID is the actor's ID inside actor work, else 0.
func (r RuntimeContext) ActorID() ActorID { return r.get().Actor }
