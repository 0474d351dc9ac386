package serve

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"
	"unicode"

	"github.com/goray-dev/goray/ray"
)

// Model multiplexing, Ray Serve's @serve.multiplexed: the replicas of one
// deployment share a pool of models (LoRA adapters, fine-tunes, per-customer
// models) that each replica loads on demand by model ID and keeps up to a
// limit, evicting the least recently used. The router keeps, per replica,
// the models loaded or loading there, so that it routes a request naming a
// model to a replica that has it, and decides where a model is loaded.

// ModelIDHeader is the request header that names a request's model on a
// multiplexed deployment, as in Ray Serve.
const ModelIDHeader = "serve_multiplexed_model_id"

// Multiplex configures model multiplexing of a deployment. For an [Actor]
// replica, the actor declares how it loads a model with [Multiplexed]; a
// [Process] replica's server loads models itself (the router forwards the
// request's model ID in the ModelIDHeader header and routes by it).
type Multiplex struct {
	// MaxModelsPerReplica is how many models one replica keeps loaded;
	// loading one more evicts the least recently used model that no
	// request is using. 0 means 3 (Ray's max_num_models_per_replica).
	MaxModelsPerReplica int
	// LoadTimeout bounds one model load; 0 means the deployment's
	// RequestTimeout.
	LoadTimeout time.Duration
}

// MultiplexedModel, embedded in the input type of a multiplexed actor
// deployment's endpoint ([Unary], [Streaming]), receives the request's
// model ID (Ray Serve's serve.get_multiplexed_model_id()): the router sets
// it from the ModelIDHeader header or the handle's model
// ([DeploymentHandle.WithModelID]), whatever the request body said. Pass
// it to [Models.Get] to get the model.
type MultiplexedModel struct {
	MultiplexedModelID string `json:"serve_multiplexed_model_id,omitempty"`
}

func (m *MultiplexedModel) setMultiplexedModelID(id string) { m.MultiplexedModelID = id }

type modelIDSetter interface{ setMultiplexedModelID(string) }

// ModelLoader says how an actor loads and unloads one model by its ID.
type ModelLoader[A, M any] struct {
	// Load loads the model id on the actor (required). Its error is the
	// error of the requests that wait for the load: return serve.Error or
	// serve.CodeError to choose their status (an unknown id: NotFound).
	Load func(ctx context.Context, actor A, id string) (M, error)
	// Unload, if set, is called when the model is evicted or the replica
	// stops, once no request of the router uses it.
	Unload func(ctx context.Context, actor A, id string, m M)
}

// Models is an actor class's multiplexed models: each actor keeps the
// models it loaded, by ID. Register it at package level with [NewModels],
// next to the class's methods, so that worker processes register it too;
// serve it with [Multiplexed]. A *Models is safe for concurrent use.
type Models[A, M any] struct {
	name      string
	loader    ModelLoader[A, M]
	load      *ray.Method[A, string, struct{}]
	unload    *ray.Method[A, string, struct{}]
	unloadAll *ray.Method[A, struct{}, struct{}]
	stores    sync.Map // actor (any) → *modelStore[M]
}

// NewModels registers the model methods name.load, name.unload and
// name.unloadAll on class (as ray.NewMethod does, so that worker
// processes have them too). A must be comparable (a pointer, typically):
// each actor keeps its own models. It panics on a nil Load, a
// non-comparable A, or a duplicate name.
func NewModels[A, CI, M any](class *ray.ActorClass[A, CI], name string, loader ModelLoader[A, M]) *Models[A, M] {
	if loader.Load == nil {
		panic("serve: NewModels " + class.Name() + "." + name + ": nil ModelLoader.Load")
	}
	if t := reflect.TypeFor[A](); !t.Comparable() {
		panic(fmt.Sprintf("serve: NewModels %s.%s: actor type %v is not comparable: use a pointer type", class.Name(), name, t))
	}
	m := &Models[A, M]{name: class.Name() + "." + name, loader: loader}
	m.load = ray.NewMethod(class, name+".load", func(ctx context.Context, a A, id string) (struct{}, error) {
		_, err := m.Get(ctx, a, id)
		return struct{}{}, err
	})
	m.unload = ray.NewMethod(class, name+".unload", func(ctx context.Context, a A, id string) (struct{}, error) {
		m.drop(ctx, a, id)
		return struct{}{}, nil
	})
	m.unloadAll = ray.NewMethod(class, name+".unloadAll", func(ctx context.Context, a A, _ struct{}) (struct{}, error) {
		if st, ok := m.stores.LoadAndDelete(any(a)); ok {
			st := st.(*modelStore[M])
			st.mu.Lock()
			ids := make([]string, 0, len(st.models))
			for id := range st.models {
				ids = append(ids, id)
			}
			st.mu.Unlock()
			slices.Sort(ids)
			for _, id := range ids {
				m.dropFrom(ctx, st, a, id)
			}
		}
		return struct{}{}, nil
	})
	return m
}

// Name returns "class.name".
func (m *Models[A, M]) Name() string { return m.name }

// modelStore is one actor's loaded models.
type modelStore[M any] struct {
	mu     sync.Mutex
	models map[string]*loadedModel[M]
}

type loadedModel[M any] struct {
	done chan struct{} // closed when the load ended
	m    M
	err  error
}

func (m *Models[A, M]) store(a A) *modelStore[M] {
	if st, ok := m.stores.Load(any(a)); ok {
		return st.(*modelStore[M])
	}
	st, _ := m.stores.LoadOrStore(any(a), &modelStore[M]{models: map[string]*loadedModel[M]{}})
	return st.(*modelStore[M])
}

// Get returns the model id of actor, loading it first if the actor does
// not have it (the router normally has it loaded before the request
// arrives). Concurrent Gets of a model being loaded wait for that one
// load; a failed load is forgotten, so the next Get tries again.
func (m *Models[A, M]) Get(ctx context.Context, actor A, id string) (M, error) {
	st := m.store(actor)
	st.mu.Lock()
	lm, ok := st.models[id]
	if !ok {
		lm = &loadedModel[M]{done: make(chan struct{})}
		st.models[id] = lm
		st.mu.Unlock()
		func() {
			defer close(lm.done)
			defer func() {
				if p := recover(); p != nil {
					lm.err = fmt.Errorf("serve: load model %q: panic: %v", id, p)
				}
			}()
			lm.m, lm.err = m.loader.Load(ctx, actor, id)
		}()
		if lm.err != nil {
			st.mu.Lock()
			if st.models[id] == lm {
				delete(st.models, id)
			}
			st.mu.Unlock()
		}
		return lm.m, lm.err
	}
	st.mu.Unlock()
	select {
	case <-lm.done:
		return lm.m, lm.err
	case <-ctx.Done():
		var zero M
		return zero, ctx.Err()
	}
}

// drop unloads the model id of actor, if it has it.
func (m *Models[A, M]) drop(ctx context.Context, a A, id string) {
	st, ok := m.stores.Load(any(a))
	if !ok {
		return
	}
	m.dropFrom(ctx, st.(*modelStore[M]), a, id)
}

func (m *Models[A, M]) dropFrom(ctx context.Context, st *modelStore[M], a A, id string) {
	st.mu.Lock()
	lm, ok := st.models[id]
	if ok {
		delete(st.models, id)
	}
	st.mu.Unlock()
	if !ok {
		return
	}
	<-lm.done
	if lm.err == nil && m.loader.Unload != nil {
		m.loader.Unload(ctx, a, id, lm.m)
	}
}

// Multiplexed makes an actor's replicas load models on demand with
// models: the router calls models' load method on the replica it picks
// for a model the replica does not have, evicts (unloads) the least
// recently used model beyond Multiplex.MaxModelsPerReplica, and unloads
// every model when the replica stops. The deployment is multiplexed
// (with Multiplex's defaults when Deployment.Multiplex is nil).
func Multiplexed[A, M any](models *Models[A, M]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.models = &actorModels[A]{
			name: models.name,
			load: func(ctx context.Context, h *ray.ActorHandle[A], id string) error {
				_, err := models.load.Remote(ctx, h, id).Get(ctx)
				return err
			},
			unload: func(ctx context.Context, h *ray.ActorHandle[A], id string) error {
				_, err := models.unload.Remote(ctx, h, id).Get(ctx)
				return err
			},
			unloadAll: func(ctx context.Context, h *ray.ActorHandle[A]) error {
				_, err := models.unloadAll.Remote(ctx, h, struct{}{}).Get(ctx)
				return err
			},
		}
	}}
}

// actorModels are an actor replica's model methods.
type actorModels[A any] struct {
	name      string
	load      func(ctx context.Context, h *ray.ActorHandle[A], id string) error
	unload    func(ctx context.Context, h *ray.ActorHandle[A], id string) error
	unloadAll func(ctx context.Context, h *ray.ActorHandle[A]) error
}

// modelLoader is an instance that loads models (an actor replica with
// Multiplexed); a Process replica's server loads its own.
type modelLoader interface {
	loadModel(ctx context.Context, id string) error
	unloadModel(ctx context.Context, id string) error
}

func (a *actorReplicaInstance[A]) loadModel(ctx context.Context, id string) error {
	return a.eps.models.load(ctx, a.hosts[0], id)
}

func (a *actorReplicaInstance[A]) unloadModel(ctx context.Context, id string) error {
	return a.eps.models.unload(ctx, a.hosts[0], id)
}

// modelKey carries a request's model ID in its context.
type modelKey struct{}

// withModel returns ctx carrying the model ID id ("" for none).
func withModel(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, modelKey{}, id)
}

// modelOf returns the model ID ctx carries, or "".
func modelOf(ctx context.Context) string {
	id, _ := ctx.Value(modelKey{}).(string)
	return id
}

// maxModelIDLen bounds a model ID.
const maxModelIDLen = 256

// checkModelID says what is wrong with a model ID a request names.
func checkModelID(id string) error {
	if len(id) > maxModelIDLen {
		return fmt.Errorf("model ID of %d bytes: at most %d", len(id), maxModelIDLen)
	}
	for _, r := range id {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("model ID %q has a control character or invalid UTF-8: use printable text", id)
		}
	}
	return nil
}

// modelSlot is one model of a replica, as the router sees it: loading or
// loaded. Guarded by the deployment's mu, except done and err, which are
// read once done is closed.
type modelSlot struct {
	d        *deployment // its replica's (a version's, during an update)
	id       string
	started  bool          // a request started its load
	loaded   bool          // the load succeeded
	done     chan struct{} // closed when the load ended
	err      error         // the load's error, set before done closes
	inflight int           // requests routed to it and not released
	used     uint64        // d.modelSeq at its last use: LRU order
	evict    *modelSlot    // the model to unload before loading this one
}

// multiplexed reports whether requests naming a model are routed by it.
func (d *deployment) multiplexed() bool { return d.spec.Multiplex != nil }

// slotLocked returns r's slot of model id, or nil. d.mu must be held.
func (r *replica) slotLocked(id string) *modelSlot {
	for _, s := range r.models {
		if s.id == id {
			return s
		}
	}
	return nil
}

// evictableLocked returns r's least recently used loaded model that no
// request uses, or nil. d.mu must be held.
func (r *replica) evictableLocked() *modelSlot {
	var v *modelSlot
	for _, s := range r.models {
		if s.loaded && s.inflight == 0 && (v == nil || s.used < v.used) {
			v = s
		}
	}
	return v
}

// canLoadLocked reports whether r can take one more model: below the limit,
// or with a model to evict. d.mu must be held.
func (d *deployment) canLoadLocked(r *replica) bool {
	return len(r.models) < d.spec.Multiplex.MaxModelsPerReplica || r.evictableLocked() != nil
}

// pickModelLocked is the model-aware pick: among ready replicas below
// their limit (and not in exclude), the least loaded one that has the
// model (loaded or loading); else, unless the model is loading on a
// replica already (its requests wait for that load rather than start a
// second one), the one with the fewest models, then the least loaded, that
// can load it. nil when none fits now. d.mu must be held.
func (d *deployment) pickModelLocked(exclude []*replica, id string) *replica {
	ok := func(r *replica) bool {
		return r.state == stateReady && r.ongoing < d.spec.MaxConcurrentRequests && !slices.Contains(exclude, r)
	}
	var best *replica
	loading := false
	for _, r := range d.replicas {
		s := r.slotLocked(id)
		if s == nil || r.state != stateReady || slices.Contains(exclude, r) {
			continue
		}
		if !s.loaded {
			loading = true
		}
		if ok(r) && (best == nil || r.ongoing < best.ongoing) {
			best = r
		}
	}
	if best != nil || loading {
		return best
	}
	for _, r := range d.replicas {
		if !ok(r) || !d.canLoadLocked(r) {
			continue
		}
		if best == nil || len(r.models) < len(best.models) || (len(r.models) == len(best.models) && r.ongoing < best.ongoing) {
			best = r
		}
	}
	return best
}

// takeModelLocked counts a request for model id routed to r (picked by
// pickModelLocked): its slot, made if r has none (evicting the least
// recently used idle model when r is at its limit). d.mu must be held.
func (d *deployment) takeModelLocked(r *replica, id string) *modelSlot {
	d.modelSeq++
	s := r.slotLocked(id)
	if s == nil {
		s = &modelSlot{d: d, id: id, done: make(chan struct{})}
		if len(r.models) >= d.spec.Multiplex.MaxModelsPerReplica {
			if v := r.evictableLocked(); v != nil {
				r.models = slices.DeleteFunc(r.models, func(x *modelSlot) bool { return x == v })
				s.evict = v
			}
		}
		r.models = append(r.models, s)
	}
	s.inflight++
	s.used = d.modelSeq
	return s
}

// releaseModel gives back a request's use of its model slot.
func releaseModel(s *modelSlot) {
	s.d.mu.Lock()
	s.inflight--
	s.d.mu.Unlock()
}

// loadError is a failed model load, the request's error.
type loadError struct {
	id  string
	err error
}

func (e loadError) Error() string { return fmt.Sprintf("load model %q: %v", e.id, e.err) }
func (e loadError) Unwrap() error { return e.err }

// ensureModel returns once the model of slot s is loaded on r: it starts
// the load if no request has (unloading the model it evicts first), or
// waits for the one under way. A load runs on its own context (bounded by
// LoadTimeout), so that a client going away does not fail the others
// waiting for it.
func ensureModel(ctx context.Context, r *replica, s *modelSlot) error {
	d := s.d
	d.mu.Lock()
	if s.loaded {
		d.mu.Unlock()
		d.s.metrics.model(d.spec.Name, s.id).requests.Inc()
		return nil
	}
	start := !s.started
	s.started = true
	if start {
		// Added under d.mu: the deployment's shutdown waits for it.
		d.wg.Go(func() { d.runLoad(r, s) })
	}
	d.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.err != nil {
		return s.err
	}
	d.s.metrics.model(d.spec.Name, s.id).requests.Inc()
	return nil
}

// runLoad loads s's model on r.
func (d *deployment) runLoad(r *replica, s *modelSlot) {
	ml, isLoader := r.inst.(modelLoader)
	ctx, cancel := context.WithTimeout(r.ctx, d.spec.Multiplex.LoadTimeout)
	defer cancel()
	if v := s.evict; v != nil {
		if isLoader {
			if err := ml.unloadModel(ctx, v.id); err != nil {
				d.s.log.Warn("serve: unload model", "replica", r.id, "model", v.id, "err", err)
			}
		}
		d.s.metrics.model(d.spec.Name, v.id).evictions.Inc()
		d.s.log.Debug("serve: model evicted", "replica", r.id, "model", v.id, "for", s.id)
	}
	begin := time.Now()
	var err error
	if isLoader {
		err = ml.loadModel(ctx, s.id)
	}
	if err != nil {
		switch {
		case r.ctx.Err() != nil:
			// The replica is stopping (lost, drained away): the requests
			// waiting for the load are retried elsewhere where they may be.
			err = codeErr(ray.Unavailable, "replica %s stopped while it loaded the model: %v", r.id, err)
		case ctx.Err() != nil:
			err = fmt.Errorf("%w: it took longer than %v (Multiplex.LoadTimeout)", err, d.spec.Multiplex.LoadTimeout)
		}
		err = loadError{id: s.id, err: err}
		d.s.metrics.loadFailed(d.spec.Name)
		d.s.log.Info("serve: model load failed", "replica", r.id, "model", s.id, "err", err)
	} else {
		m := d.s.metrics.model(d.spec.Name, s.id)
		m.loads.Inc()
		m.loadSeconds.Update(time.Since(begin).Seconds())
	}
	d.mu.Lock()
	s.err = err
	if err != nil {
		r.models = slices.DeleteFunc(r.models, func(x *modelSlot) bool { return x == s })
	} else {
		s.loaded = true
	}
	close(s.done)
	d.dispatchLocked() // queued requests for the model may go elsewhere now
	d.changedLocked()
	prev := d.prev
	d.mu.Unlock()
	prev.dispatch() // the version before d queues for d's replicas too
}

// unloadModels unloads every model of a stopping actor replica (best
// effort: it is about to be killed), so that Unload hooks run.
func unloadModels(ctx context.Context, inst instance) {
	a, ok := inst.(interface{ unloadAllModels(context.Context) error })
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = a.unloadAllModels(ctx)
}

func (a *actorReplicaInstance[A]) unloadAllModels(ctx context.Context) error {
	if a.eps.models == nil {
		return nil
	}
	return a.eps.models.unloadAll(ctx, a.hosts[0])
}

// modelNotServed is the 404 of a model ID a deployment does not list in
// Models.
func modelNotServed(name, id string, models []string) *CallError {
	return &CallError{Deployment: name, Code: http.StatusNotFound, kind: kindNotFound,
		Message: fmt.Sprintf("deployment %q does not serve model %q (it serves %s)", name, id, quoteList(models))}
}

// quoteList renders ids as "a", "b" and "c".
func quoteList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = fmt.Sprintf("%q", id)
	}
	switch len(q) {
	case 0:
		return "none"
	case 1:
		return q[0]
	}
	out := ""
	for i, s := range q[:len(q)-1] {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out + " and " + q[len(q)-1]
}

// modelsName names the actor's Models, "" without a Multiplexed endpoint.
func (r *actorReplica[A, CI]) modelsName() string {
	if r.eps.models == nil {
		return ""
	}
	return r.eps.models.name
}

// routeModel checks the model ID id a request names and returns the
// model to route it by: "" when the deployment is not multiplexed or id is
// empty; a 400 for an ID that is not one, a 404 for one the deployment's
// Models do not list.
func (d *deployment) routeModel(id string) (string, *CallError) {
	if id == "" || !d.multiplexed() {
		return "", nil
	}
	if err := checkModelID(id); err != nil {
		return "", &CallError{Deployment: d.spec.Name, Code: http.StatusBadRequest, kind: kindBadCall,
			Message: fmt.Sprintf("deployment %q: %v", d.spec.Name, err)}
	}
	if len(d.spec.Models) > 0 && !slices.Contains(d.spec.Models, id) {
		return "", modelNotServed(d.spec.Name, id, d.spec.Models)
	}
	return id, nil
}

// modelsTakenLocked refuses a deployment listing a model ID that another
// deployment of the server serves (an update of the same name may keep
// its own). s.mu must be held.
func (s *Server) modelsTakenLocked(spec Deployment) error {
	for _, id := range spec.Models {
		for name, d := range s.deployments {
			if name != spec.Name && slices.Contains(d.spec.Models, id) {
				return fieldError(spec.Name, "Models", fmt.Sprintf("model %q is served by deployment %q already: a model ID routes to one deployment; delete or update that one, or pick another ID", id, name))
			}
		}
	}
	return nil
}

// pickTakeForLocked is pickTakeLocked for a request naming model ("" for
// none): on a multiplexed deployment the model-aware pick, whose replica
// also takes the request's slot of the model. During a rolling update the
// next version's pick wins when it has the model and d's has not, or is
// less loaded. d.mu must be held; it takes d.next.mu.
func (d *deployment) pickTakeForLocked(exclude []*replica, model string) (*replica, *modelSlot) {
	if model == "" || !d.multiplexed() {
		return d.pickTakeLocked(exclude), nil
	}
	r := d.pickModelLocked(exclude, model)
	if n := d.next; n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
		var nr *replica
		if n.multiplexed() {
			nr = n.pickModelLocked(exclude, model)
		} else {
			nr = n.pickLocked(exclude)
		}
		if nr != nil && (r == nil || betterForModel(nr, r, model)) {
			r = nr
		}
	}
	if r == nil {
		return nil, nil
	}
	r.d.takeLocked(r)
	if !r.d.multiplexed() {
		return r, nil
	}
	return r, r.d.takeModelLocked(r, model)
}

// betterForModel reports whether a request for model should go to a
// rather than b: a has the model and b has not, or neither or both have
// it and a has fewer requests. Both deployments' mu must be held.
func betterForModel(a, b *replica, model string) bool {
	ha, hb := a.slotLocked(model) != nil, b.slotLocked(model) != nil
	if ha != hb {
		return ha
	}
	return a.ongoing < b.ongoing
}
