// The methods of a Backend: each is its cluster runtime's (package
// backend/cluster), listed here so that go doc shows them.

package local

import (
	"context"

	"github.com/goray-dev/goray/backend"
)

// Start starts the cluster (ray.NewCluster calls it): the runner, then the
// node source.
func (b *Backend) Start(ctx context.Context, exec backend.Executor) error {
	return b.rt.Start(ctx, exec)
}

// SubmitTask implements backend.Backend.
func (b *Backend) SubmitTask(ctx context.Context, spec *backend.TaskSpec) (backend.ObjectID, error) {
	return b.rt.SubmitTask(ctx, spec)
}

// SubmitTaskArg implements backend.ArgSubmitter.
func (b *Backend) SubmitTaskArg(ctx context.Context, spec *backend.TaskSpec, arg backend.Arg) (backend.ObjectID, error) {
	return b.rt.SubmitTaskArg(ctx, spec, arg)
}

// Put implements backend.Backend.
func (b *Backend) Put(ctx context.Context, v backend.Value) (backend.ObjectID, error) {
	return b.rt.Put(ctx, v)
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, id backend.ObjectID) (backend.Value, error) {
	return b.rt.Get(ctx, id)
}

// Wait implements backend.Backend.
func (b *Backend) Wait(ctx context.Context, ids []backend.ObjectID, n int) ([]bool, error) {
	return b.rt.Wait(ctx, ids, n)
}

// Free implements backend.Backend.
func (b *Backend) Free(ids ...backend.ObjectID) {
	b.rt.Free(ids...)
}

// CreateActor implements backend.Backend.
func (b *Backend) CreateActor(ctx context.Context, spec *backend.ActorSpec) (backend.ActorID, error) {
	return b.rt.CreateActor(ctx, spec)
}

// CallActor implements backend.Backend.
func (b *Backend) CallActor(ctx context.Context, spec *backend.CallSpec) (backend.ObjectID, error) {
	return b.rt.CallActor(ctx, spec)
}

// ActorReady implements backend.Backend.
func (b *Backend) ActorReady(ctx context.Context, id backend.ActorID) error {
	return b.rt.ActorReady(ctx, id)
}

// KillActor implements backend.Backend.
func (b *Backend) KillActor(ctx context.Context, id backend.ActorID) error {
	return b.rt.KillActor(ctx, id)
}

// NamedActor implements backend.Backend.
func (b *Backend) NamedActor(ctx context.Context, name string) (backend.ActorID, string, error) {
	return b.rt.NamedActor(ctx, name)
}

// CreatePlacementGroup implements backend.Backend.
func (b *Backend) CreatePlacementGroup(ctx context.Context, spec *backend.PlacementGroupSpec) (backend.PlacementGroupID, error) {
	return b.rt.CreatePlacementGroup(ctx, spec)
}

// PlacementGroupReady implements backend.Backend.
func (b *Backend) PlacementGroupReady(ctx context.Context, id backend.PlacementGroupID) error {
	return b.rt.PlacementGroupReady(ctx, id)
}

// RemovePlacementGroup implements backend.Backend; it also releases a
// slice reservation (its Group).
func (b *Backend) RemovePlacementGroup(ctx context.Context, id backend.PlacementGroupID) error {
	return b.rt.RemovePlacementGroup(ctx, id)
}

// CancelTask stops a waiting, queued or running task or actor call
// (backend.TaskCanceler): its result fails with Canceled. With opts.Force
// a running task's worker process ends.
func (b *Backend) CancelTask(ctx context.Context, id backend.ObjectID, opts backend.CancelOptions) error {
	return b.rt.CancelTask(ctx, id, opts)
}

// SupportsNativeValues implements backend.NativeValues.
func (b *Backend) SupportsNativeValues() bool {
	return b.rt.SupportsNativeValues()
}

// Snapshot reports the cluster's nodes, free resources, queued and running
// work, actors and placement groups (backend.Snapshotter; the dashboard
// shows it).
func (b *Backend) Snapshot(ctx context.Context) (*backend.State, error) {
	return b.rt.Snapshot(ctx)
}

// KillNode ends a node abruptly, as a host failure does: its running tasks
// fail with Unavailable and are retried, its actors restart per their max
// restarts, and a reserved slice with a host on it fails all its work at
// once (backend.FaultInjector).
func (b *Backend) KillNode(ctx context.Context, node string) error {
	return b.rt.KillNode(ctx, node)
}

// RestartNode brings a killed node back, empty and idle
// (backend.FaultInjector).
func (b *Backend) RestartNode(ctx context.Context, node string) error {
	return b.rt.RestartNode(ctx, node)
}

// PreemptSlice ends every host of a TPU slice at once, as a maintenance
// event or a Spot preemption does: work on it fails with Unavailable and a
// reservation holding it is broken. NotFound names an unknown slice.
func (b *Backend) PreemptSlice(ctx context.Context, slice string) error {
	return b.rt.PreemptSlice(ctx, slice)
}

// ReserveSlices reserves whole, intact, idle TPU slices, or one sub-slice,
// atomically (backend.SliceReserver); ray.NewSlicePlacementGroup calls it.
func (b *Backend) ReserveSlices(ctx context.Context, req *backend.SliceRequest) (*backend.SliceReservation, error) {
	return b.rt.ReserveSlices(ctx, req)
}

// Slices reports every TPU slice of the cluster: its hosts, whether it is
// intact and idle, and who reserved it.
func (b *Backend) Slices(ctx context.Context) ([]backend.SliceState, error) {
	return b.rt.Slices(ctx)
}

// PendingSliceRequests reports the slice reservations that are waiting,
// shape by shape, in the order they will be served.
func (b *Backend) PendingSliceRequests(ctx context.Context) ([]backend.PendingSliceRequest, error) {
	return b.rt.PendingSliceRequests(ctx)
}

// QueuedSliceRequests is how many slice reservations are waiting.
func (b *Backend) QueuedSliceRequests() int {
	return b.rt.QueuedSliceRequests()
}

// Close stops the cluster: queued and running work fails with ErrClosed,
// slice claims are released and every goroutine and worker it started has
// ended when it returns. It is idempotent.
func (b *Backend) Close() error {
	return b.rt.Close()
}
