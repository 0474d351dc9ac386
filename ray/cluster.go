package ray

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/goray-dev/goray/backend"
)

// Options configures a [Cluster]. A nil *Options means the defaults.
type Options struct {
	// Codec encodes arguments and results; nil means [JSON].
	Codec Codec
	// DisableCodec passes values between caller and task unencoded. Only
	// in-process backends support it (they implement
	// backend.NativeValues); it exists for benchmarks and is otherwise a
	// trap: a value that works without the codec may fail on a real
	// cluster.
	DisableCodec bool
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Cluster is the handle through which a program submits tasks, creates
// actors and placement groups, and reserves TPU slices. It wraps one
// backend: backend/local for the in-process simulator, backend/fake for
// unit tests, backend/kubernetes for real clusters.
//
// A Cluster is safe for concurrent use. Its zero value is not usable; a nil
// *Cluster makes every call fail with InvalidArgument.
type Cluster struct {
	b       backend.Backend
	argSub  backend.ArgSubmitter     // b, when it takes a task's input beside its spec
	callSub backend.CallArgSubmitter // b, when it takes a call's input beside its spec
	codec   Codec                    // nil when the codec is disabled
	log     *slog.Logger
	closed  atomic.Bool
	reap    *reaper
	refs    refAllocator
}

// NewCluster starts b and returns a cluster on it. The cluster owns b:
// [Cluster.Close] closes it.
func NewCluster(ctx context.Context, b Backend, opts *Options) (*Cluster, error) {
	const op = "create cluster"
	if ctx == nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "nil context; pass context.Background() or a request's context")
	}
	if b == nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "nil backend")
	}
	if opts == nil {
		opts = &Options{}
	}
	c := &Cluster{b: b, codec: opts.Codec, log: opts.Logger}
	c.argSub, _ = b.(backend.ArgSubmitter)
	c.callSub, _ = b.(backend.CallArgSubmitter)
	if c.codec == nil {
		c.codec = JSON
	}
	if opts.DisableCodec {
		nv, ok := b.(backend.NativeValues)
		if !ok || !nv.SupportsNativeValues() {
			return nil, backend.Errorf(backend.InvalidArgument, op, "DisableCodec needs an in-process backend; %T cannot carry unencoded values", b)
		}
		c.codec = nil
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.reap = &reaper{b: b, log: c.log}
	c.refs.reap = c.reap
	if err := b.Start(ctx, NewExecutor(c.codec)); err != nil {
		return nil, backend.Wrap(backend.CodeOf(err), op, err)
	}
	return c, nil
}

// Close closes the cluster and its backend. Queued and running work fails
// with ErrClosed; Close returns after the backend's goroutines have
// returned, so user code must honour its context. Close is idempotent.
func (c *Cluster) Close() error {
	if c == nil {
		return nil
	}
	if c.closed.Swap(true) {
		return nil
	}
	c.reap.close()
	return c.b.Close()
}

// Backend returns the cluster's backend. For a backend's own methods or an
// optional capability, use [As].
func (c *Cluster) Backend() Backend {
	if c == nil {
		return nil
	}
	return c.b
}

// Snapshot returns the backend's state, if it can report one.
func (c *Cluster) Snapshot(ctx context.Context) (*State, error) {
	if err := c.checkCtx(ctx, "snapshot cluster"); err != nil {
		return nil, err
	}
	s, ok := c.b.(backend.Snapshotter)
	if !ok {
		return nil, backend.Errorf(backend.Unimplemented, "snapshot cluster", "backend %T cannot report its state", c.b)
	}
	return s.Snapshot(ctx)
}

// checkCtx is check for a call given ctx: a nil ctx is an InvalidArgument
// error, not a panic deep in a backend.
func (c *Cluster) checkCtx(ctx context.Context, op string) error {
	if ctx == nil {
		return backend.Errorf(backend.InvalidArgument, op, "nil context; pass context.Background() or a request's context")
	}
	return c.check(op)
}

func (c *Cluster) check(op string) error {
	if c == nil || c.b == nil {
		return backend.Errorf(backend.InvalidArgument, op, "nil cluster")
	}
	if c.closed.Load() {
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	return nil
}

// As returns the cluster's backend as a T, and whether it is one: a
// concrete backend for the calls only it has (*local.Backend's
// PreemptSlice, *kubernetes.Backend's ClusterID) or an optional capability
// ([FaultInjector], [SliceReserver], backend.Snapshotter):
//
//	if lb, ok := ray.As[*local.Backend](c); ok {
//		err = lb.PreemptSlice(ctx, "v6e-16-0")
//	}
//
// A backend that wraps another can expose what it wraps by implementing
// interface{ As(target any) bool }, as drivers do in the Go CDK: As calls
// it with a *T, and the backend sets *target and returns true when it can.
func As[T any](c *Cluster) (T, bool) {
	var t T
	b := c.Backend()
	if b == nil {
		return t, false
	}
	if v, ok := b.(T); ok {
		return v, true
	}
	if a, ok := b.(interface{ As(target any) bool }); ok && a.As(&t) {
		return t, true
	}
	return t, false
}

// DriverHost returns a host of this process that every worker of c can
// connect to, for servers the driver runs for its workers: the backend's
// answer when it is a backend.DriverAddresser (on Kubernetes, the driver
// pod's IP, or an error saying what to set when the driver runs outside
// the cluster), else "127.0.0.1" (workers in this process or beside it).
func DriverHost(ctx context.Context, c *Cluster) (string, error) {
	if d, ok := As[backend.DriverAddresser](c); ok {
		return d.DriverHost(ctx)
	}
	return "127.0.0.1", nil
}
