package data

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

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
		return mapKernel(func(ctx context.Context, in I) (O, error) { return fn(ctx, a, in) }, false)
	})
}

// NewFilterMethod registers fn, which keeps the rows it returns true for,
// as method name of class.
func NewFilterMethod[A, CI, T any](class *ray.ActorClass[A, CI], name string, fn func(ctx context.Context, actor A, in T) (bool, error)) *Method[A, T, T] {
	return registerMethod(class, name, func(a A) kernel[T, T] {
		return filterKernel(func(ctx context.Context, in T) (bool, error) { return fn(ctx, a, in) }, false)
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
// when batches have kept waiting for an actor for a while, fewer (down to
// Min) when actors have been idle for a while, and none after the run:
// every actor is killed and every slice released when the run ends, on
// every path.
//
// A pool keeps what it reserved: an actor's constructor (the model load)
// and its slice reservation (new worker pods, on Kubernetes) cost minutes
// on real TPUs, so a pool does not grow for a batch that waits a moment
// nor shrink for an actor idle a moment. It grows by one actor when, over
// the last GrowAfter, batches were waiting for an actor at least three
// quarters of the time, and it stops an actor beyond Min that has been
// idle for IdleTimeout (the one idle longest first: calls go to the
// actor used last, so that spare actors become idle). At a steady load
// the reservations over a run are at most the peak number of actors plus
// one. This is Ray Data's ActorPoolStrategy(min_size, max_size), whose
// autoscaler likewise adds actors while the pool is saturated and
// removes idle ones. An actor that dies is replaced at once while the
// pool is below Min.
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
	// GrowAfter is how long batches must keep waiting for an actor (three
	// quarters of the time over that span) before the pool adds one; 0
	// means DefaultGrowAfter.
	GrowAfter time.Duration
	// IdleTimeout is how long an actor beyond Min stays idle before the
	// pool stops it and releases its slice; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Slice, when set, reserves one slice of this shape per actor.
	Slice *ray.SliceSpec
	// ActorOptions apply to every actor (ray.MaxRestarts, ...).
	ActorOptions []ray.ActorOption
}

// The defaults of [Pool].GrowAfter and [Pool].IdleTimeout.
const (
	DefaultGrowAfter   = time.Second
	DefaultIdleTimeout = 30 * time.Second
)

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
		if p.GrowAfter < 0 || p.IdleTimeout < 0 {
			return nil, badArg("ApplyPool: GrowAfter %v, IdleTimeout %v: need 0 (the default) or more", p.GrowAfter, p.IdleTimeout)
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
	}, nil, opts, fuseNone)
}

// member is one actor of a pool and the slice it holds.
type member[A any] struct {
	h         *ray.ActorHandle[A]
	slice     *ray.SlicePlacementGroup
	idleSince time.Time
}

// actorPool is a pool's life within one run.
type actorPool[A, CI any] struct {
	spec   Pool[A, CI]
	name   string
	log    *slog.Logger
	ctx    context.Context // cancelled by close: stops growing
	cancel context.CancelFunc
	dead   chan struct{} // closed when the pool can have no actor
	now    func() time.Time
	// newMember and stopMember start and stop an actor (replaced in
	// tests of the policy).
	newMember  func(ctx context.Context) (*member[A], error)
	stopMember func(m *member[A])

	mu       sync.Mutex
	members  map[*member[A]]bool
	idle     []*member[A]      // the actor used last on top
	waiters  []chan *member[A] // calls waiting for an actor, first come first served
	size     int               // members plus one growing
	growing  bool
	full     bool // growing failed: use what we have
	failed   error
	load     loadWindow
	counters PoolStats
	grows    sync.WaitGroup // grow and the ticker
}

func newActorPool[A, CI any](ctx context.Context, name string, spec Pool[A, CI], log *slog.Logger) *actorPool[A, CI] {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if spec.GrowAfter == 0 {
		spec.GrowAfter = DefaultGrowAfter
	}
	if spec.IdleTimeout == 0 {
		spec.IdleTimeout = DefaultIdleTimeout
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &actorPool[A, CI]{
		spec: spec, name: name, log: log, ctx: ctx, cancel: cancel,
		dead: make(chan struct{}), members: map[*member[A]]bool{}, now: time.Now,
		counters: PoolStats{Min: spec.Min, Max: spec.Max},
	}
	p.newMember, p.stopMember = p.startActor, p.stopActor
	p.load.reset(p.now())
	return p
}

// loadWindow measures, over a window of time, how long calls were waiting
// for an actor.
type loadWindow struct {
	start, last time.Time
	waiting     int           // calls waiting now
	busy        time.Duration // time in the window with a call waiting
}

func (w *loadWindow) reset(now time.Time) { w.start, w.last, w.busy = now, now, 0 }

// advance accounts for the time up to now; call it before waiting changes.
func (w *loadWindow) advance(now time.Time) {
	if w.waiting > 0 && now.After(w.last) {
		w.busy += now.Sub(w.last)
	}
	if now.After(w.last) {
		w.last = now
	}
}

// deep says whether the window is span long and calls waited for at least
// three quarters of it.
func (w *loadWindow) deep(now time.Time, span time.Duration) (full, deep bool) {
	w.advance(now)
	el := now.Sub(w.start)
	if el < span {
		return false, false
	}
	return true, w.busy*4 >= el*3
}

// start starts the Min actors, in parallel, and fails if any fails; then
// the ticker that grows and shrinks the pool.
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
			p.handOff(m)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	p.mu.Lock()
	p.size = len(p.members)
	p.load.reset(p.now())
	p.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("starting %d actors of %s: %w", p.spec.Min, p.spec.Class.Name(), err)
	}
	if p.spec.Max > p.spec.Min {
		period := min(p.spec.GrowAfter, p.spec.IdleTimeout) / 4
		period = max(time.Millisecond, min(period, 250*time.Millisecond))
		p.grows.Go(func() { p.tickEvery(period) })
	}
	return nil
}

// tickEvery runs the pool's policy every period until the pool closes.
func (p *actorPool[A, CI]) tickEvery(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			for _, m := range p.tick(p.now()) {
				p.stopMember(m)
			}
		}
	}
}

// tick grows the pool by one actor when calls have kept waiting for
// GrowAfter, and takes out of it the actors beyond Min idle for
// IdleTimeout, which it returns for the caller to stop.
func (p *actorPool[A, CI]) tick(now time.Time) (stop []*member[A]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil
	}
	if full, deep := p.load.deep(now, p.spec.GrowAfter); full {
		if deep && !p.growing && !p.full && p.size < p.spec.Max {
			p.startGrow()
		}
		p.load.reset(now)
	}
	for len(p.idle) > 0 && p.size > p.spec.Min && now.Sub(p.idle[0].idleSince) >= p.spec.IdleTimeout {
		m := p.idle[0]
		p.idle = p.idle[1:]
		p.remove(m)
		stop = append(stop, m)
	}
	return stop
}

// startGrow starts adding one actor; p.mu is held.
func (p *actorPool[A, CI]) startGrow() {
	p.growing = true
	p.size++
	p.grows.Go(p.grow)
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

// remove takes a member out of the pool; p.mu is held. The caller stops
// it.
func (p *actorPool[A, CI]) remove(m *member[A]) {
	p.size--
	delete(p.members, m)
	p.counters.Stopped++
	p.full = false // room again
}

// handOff gives an actor to the call that has waited longest, or makes it
// idle; p.mu is held.
func (p *actorPool[A, CI]) handOff(m *member[A]) {
	if len(p.waiters) > 0 {
		p.load.advance(p.now())
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.load.waiting--
		ch <- m // buffered: never blocks
		return
	}
	m.idleSince = p.now()
	p.idle = append(p.idle, m)
}

func (p *actorPool[A, CI]) startActor(ctx context.Context) (*member[A], error) {
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
		p.stopActor(m)
		return nil, err
	}
	return m, nil
}

// stopActor kills a member's actor and releases its slice.
func (p *actorPool[A, CI]) stopActor(m *member[A]) {
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

// acquire returns the idle actor used last, or waits for one.
func (p *actorPool[A, CI]) acquire(ctx context.Context) (*member[A], error) {
	m, ch, err := p.take()
	if m != nil || err != nil {
		return m, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-p.dead:
		err = p.failed
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.waiters, ch); i >= 0 {
		p.load.advance(p.now())
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.load.waiting--
	}
	select {
	case m := <-ch: // handed over as we gave up: pass it on
		p.handOff(m)
	default:
	}
	return nil, err
}

// take returns the idle actor used last, or else the channel on which the
// caller, now waiting, will get one, or the pool's failure.
func (p *actorPool[A, CI]) take() (*member[A], chan *member[A], error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.idle); n > 0 {
		m := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return m, nil, nil
	}
	if p.failed != nil {
		return nil, nil, p.failed
	}
	ch := make(chan *member[A], 1)
	p.load.advance(p.now())
	p.waiters = append(p.waiters, ch)
	p.load.waiting++
	return nil, ch, nil
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
		p.handOff(m)
	}
	p.load.reset(p.now()) // the next growth needs a new spell of waiting
}

// put returns an actor after a call: a dead one leaves the pool (and is
// replaced at once while the pool is below Min); a live one goes to the
// next waiting call, or idles.
func (p *actorPool[A, CI]) put(m *member[A], callErr error) {
	p.mu.Lock()
	if ray.CodeOf(callErr) == ray.ActorDied {
		p.remove(m)
		if p.size < p.spec.Min && !p.growing && p.ctx.Err() == nil {
			p.startGrow()
		}
		p.mu.Unlock()
		p.stopMember(m)
		return
	}
	p.handOff(m)
	p.mu.Unlock()
}

// close stops growing, then kills every actor and releases every slice.
func (p *actorPool[A, CI]) close(context.Context) {
	p.cancel()
	p.grows.Wait()
	p.mu.Lock()
	ms := lo.Keys(p.members)
	p.counters.Stopped += len(ms)
	p.members = map[*member[A]]bool{}
	p.idle = nil
	p.size = 0
	p.mu.Unlock()
	for _, m := range ms {
		p.stopMember(m)
	}
}

func (p *actorPool[A, CI]) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counters
}
