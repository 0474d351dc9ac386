package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/samber/lo"

	"github.com/goray-dev/goray/ray"
)

// Method is a registered actor method that [ApplyPool] runs on batches of
// rows, on the actors of a pool. Register it at package initialization
// with [NewMapMethod], [NewFilterMethod], [NewFlatMapMethod] or
// [NewBatchMethod], next to its ray.ActorClass. A *Method is immutable and
// safe for concurrent use.
type Method[A, I, O any] struct {
	name string
	m    *ray.Method[A, []I, wireBatch[O]]
}

// Name returns "class.method".
func (m *Method[A, I, O]) Name() string { return m.name }

func registerMethod[A, CI, I, O any](class *ray.ActorClass[A, CI], name string, k func(actor A) kernel[I, O]) *Method[A, I, O] {
	m := ray.NewMethod(class, name, func(ctx context.Context, a A, rows []I) (wireBatch[O], error) {
		return remoteKernel(k(a))(ctx, rows)
	})
	return &Method[A, I, O]{name: m.Name(), m: m}
}

// NewMapMethod registers fn, applied to each row on an actor, as method
// name of class. It panics on a duplicate name, like ray.NewMethod.
func NewMapMethod[A, CI, I, O any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in I) (O, error)) *Method[A, I, O] {
	return registerMethod(class, name, func(a A) kernel[I, O] {
		return mapKernel(func(ctx context.Context, in I) (O, error) { return fn(ctx, a, in) })
	})
}

// NewFilterMethod registers fn, which keeps the rows it returns true for,
// as method name of class.
func NewFilterMethod[A, CI, T any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in T) (bool, error)) *Method[A, T, T] {
	return registerMethod(class, name, func(a A) kernel[T, T] {
		return filterKernel(func(ctx context.Context, in T) (bool, error) { return fn(ctx, a, in) })
	})
}

// NewFlatMapMethod registers fn, which turns each row into zero or more,
// as method name of class.
func NewFlatMapMethod[A, CI, I, O any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in I) ([]O, error)) *Method[A, I, O] {
	return registerMethod(class, name, func(a A) kernel[I, O] {
		return flatMapKernel(func(ctx context.Context, in I) ([]O, error) { return fn(ctx, a, in) })
	})
}

// NewBatchMethod registers fn, applied to batches of rows, as method name
// of class. An error fails the whole batch: each of its rows is a bad row.
func NewBatchMethod[A, CI, I, O any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in []I) ([]O, error)) *Method[A, I, O] {
	return registerMethod(class, name, func(a A) kernel[I, O] {
		return batchKernel(func(ctx context.Context, in []I) ([]O, error) { return fn(ctx, a, in) })
	})
}

// Pool describes the actor pool that [ApplyPool] starts for each run: Min
// actors of Class built from Arg when the run starts, more (up to Max)
// while batches wait for a free actor, fewer (down to Min) when an actor
// comes back idle while another is idle already, and none after the run:
// every actor is killed and every slice released when the run ends, on
// every path.
//
// With Slice set, each actor holds a whole TPU slice: the pool reserves
// one slice per actor with ray.NewSlicePlacementGroup (atomically, every
// host or none) and starts the actor on the slice's first host (bundle 0)
// holding that host's chips; the other hosts stay reserved for it (a model
// replica that spans them reaches them with ray.RunOnSlice-style work).
// Its constructor sees the slice's TPU_* env through ray.Runtime. When no
// slice is free the pool stops growing and uses the actors it has.
type Pool[A, CI any] struct {
	Cluster *ray.Cluster
	Class   *ray.ActorClass[A, CI]
	// Arg is the constructor's input.
	Arg CI
	// Min actors (at least 1) run for the whole run; Max (0 means Min)
	// bounds growth.
	Min, Max int
	// Slice, when set, reserves one slice of this shape per actor.
	Slice *ray.SliceSpec
	// ActorOptions apply to every actor (ray.MaxRestarts, ...).
	ActorOptions []ray.ActorOption
}

// ApplyPool adds an operator that runs method m on batches of d's rows on
// an actor pool described by p (see [Pool]). [Concurrency] (default: the
// pool's Max) bounds the calls in flight; [BatchSize] sets the rows per
// call.
func ApplyPool[A, CI, I, O any](d *Dataset[I], p Pool[A, CI], m *Method[A, I, O], opts ...Option) *Dataset[O] {
	if m == nil {
		return failed[O](badArg("ApplyPool: nil Method (make one with NewMapMethod, NewFilterMethod, NewFlatMapMethod or NewBatchMethod)"))
	}
	return operator(d, m.name, func(r *run, o *opState, cfg *config) (kernel[I, O], error) {
		if p.Cluster == nil || p.Class == nil {
			return nil, badArg("ApplyPool: the Pool needs a Cluster and a Class")
		}
		if p.Max == 0 {
			p.Max = p.Min
		}
		if p.Min < 1 || p.Max < p.Min {
			return nil, badArg("ApplyPool: pool size Min %d, Max %d: need 1 <= Min <= Max", p.Min, p.Max)
		}
		if !cfg.concSet {
			cfg.concurrency = p.Max
		}
		ap := newActorPool(r.ctx, o.name, p, cfg.logger)
		r.onEnd(ap.close)
		o.pool = ap.stats
		if err := ap.start(r.ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context, rows []I) (result[O], error) {
			a, err := ap.acquire(ctx)
			if err != nil {
				return result[O]{}, err
			}
			w, err := m.m.Remote(ctx, a.h, rows).Get(ctx)
			ap.put(a, err)
			if err != nil {
				return result[O]{}, err
			}
			return fromWire(w), nil
		}, nil
	}, opts)
}

// member is one actor of a pool and the slice it holds.
type member[A any] struct {
	h     *ray.ActorHandle[A]
	slice *ray.SlicePlacementGroup
}

// actorPool is a pool's life within one run.
type actorPool[A, CI any] struct {
	spec   Pool[A, CI]
	name   string
	log    *slog.Logger
	ctx    context.Context // cancelled by close: stops growing
	cancel context.CancelFunc
	idle   chan *member[A]
	dead   chan struct{} // closed when the pool can have no actor

	mu       sync.Mutex
	members  map[*member[A]]bool
	size     int // members plus one growing
	growing  bool
	full     bool // growing failed: use what we have
	waiting  int
	failed   error
	counters PoolStats
	grows    sync.WaitGroup
}

func newActorPool[A, CI any](ctx context.Context, name string, spec Pool[A, CI], log *slog.Logger) *actorPool[A, CI] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &actorPool[A, CI]{
		spec: spec, name: name, log: log, ctx: ctx, cancel: cancel,
		idle: make(chan *member[A], spec.Max), dead: make(chan struct{}), members: map[*member[A]]bool{},
		counters: PoolStats{Min: spec.Min, Max: spec.Max},
	}
}

// start starts the Min actors, in parallel, and fails if any fails.
func (p *actorPool[A, CI]) start(ctx context.Context) error {
	errs := make([]error, p.spec.Min)
	var wg sync.WaitGroup
	for i := range p.spec.Min {
		wg.Go(func() {
			m, err := p.newMember(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			p.mu.Lock()
			p.add(m)
			p.mu.Unlock()
			p.idle <- m
		})
	}
	wg.Wait()
	p.mu.Lock()
	p.size = len(p.members)
	p.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("starting %d actors of %s: %w", p.spec.Min, p.spec.Class.Name(), err)
	}
	return nil
}

// add records a new member; p.mu is held.
func (p *actorPool[A, CI]) add(m *member[A]) {
	p.members[m] = true
	p.counters.Started++
	if m.slice != nil {
		p.counters.SlicesReserved++
	}
	p.counters.Peak = max(p.counters.Peak, len(p.members))
}

func (p *actorPool[A, CI]) newMember(ctx context.Context) (*member[A], error) {
	c := p.spec.Cluster
	m := &member[A]{}
	opts := p.spec.ActorOptions
	if p.spec.Slice != nil {
		spec := *p.spec.Slice
		if spec.Name == "" {
			spec.Name = "data." + p.name
		}
		s, err := ray.NewSlicePlacementGroup(ctx, c, spec)
		if err != nil {
			return nil, err
		}
		m.slice = s
		p.log.Debug("data: pool reserved a slice", "op", p.name, "slices", s.SliceNames())
		tpus := s.BundleResources()["TPU"]
		opts = append([]ray.ActorOption{ray.InBundle(s.PlacementGroup(), 0), ray.Resources{"TPU": tpus}}, opts...)
	}
	m.h = p.spec.Class.Remote(ctx, c, p.spec.Arg, opts...)
	if err := m.h.Ready(ctx); err != nil {
		p.stop(m)
		return nil, err
	}
	return m, nil
}

// stop kills a member's actor and releases its slice.
func (p *actorPool[A, CI]) stop(m *member[A]) {
	ctx := context.WithoutCancel(p.ctx)
	if err := m.h.Kill(ctx); err != nil && !errors.Is(err, ray.ErrClosed) {
		p.log.Debug("data: pool could not kill an actor", "op", p.name, "err", err)
	}
	if m.slice != nil {
		if err := m.slice.Release(ctx); err != nil {
			p.log.Debug("data: pool could not release a slice", "op", p.name, "err", err)
		}
	}
}

// acquire returns an idle actor, growing the pool while callers wait.
func (p *actorPool[A, CI]) acquire(ctx context.Context) (*member[A], error) {
	select {
	case m := <-p.idle:
		return m, nil
	default:
	}
	p.mu.Lock()
	p.waiting++
	if !p.growing && !p.full && p.size < p.spec.Max {
		p.growing = true
		p.size++
		p.grows.Go(p.grow)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	select {
	case m := <-p.idle:
		return m, nil
	case <-p.dead:
		return nil, p.failed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// grow adds one actor; when it cannot (no free slice, no room), the pool
// stops growing.
func (p *actorPool[A, CI]) grow() {
	m, err := p.newMember(p.ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.growing = false
	if err != nil {
		p.size--
		if p.ctx.Err() == nil {
			p.full = true
			p.log.Debug("data: pool stops growing", "op", p.name, "size", p.size, "err", err)
		}
		if p.size == 0 && p.failed == nil {
			p.failed = fmt.Errorf("actor pool %s has no actor: %w", p.name, err)
			close(p.dead)
		}
		return
	}
	p.add(m)
	if p.ctx.Err() == nil { // else close, which waits for grow, stops it
		p.idle <- m
	}
}

// put returns an actor after a call: a dead one leaves the pool; an idle
// one beyond Min leaves it when another is idle already and no call waits.
func (p *actorPool[A, CI]) put(m *member[A], callErr error) {
	p.mu.Lock()
	leave := ray.Code(callErr) == ray.ActorDied ||
		(p.size > p.spec.Min && p.waiting == 0 && len(p.idle) > 0)
	if leave {
		p.size--
		delete(p.members, m)
		p.counters.Stopped++
		p.full = false // room again
	}
	p.mu.Unlock()
	if leave {
		p.stop(m)
		return
	}
	p.idle <- m
}

// close stops growing, then kills every actor and releases every slice.
func (p *actorPool[A, CI]) close(context.Context) {
	p.cancel()
	p.grows.Wait()
	p.mu.Lock()
	ms := lo.Keys(p.members)
	p.counters.Stopped += len(ms)
	p.members = map[*member[A]]bool{}
	p.size = 0
	p.mu.Unlock()
	for _, m := range ms {
		p.stop(m)
	}
}

func (p *actorPool[A, CI]) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counters
}
