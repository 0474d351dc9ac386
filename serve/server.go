package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// Options configures a Server. A nil *Options means the defaults.
type Options struct {
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Client is the HTTP client that proxies to Process replicas; nil
	// means a client with keep-alive connections and no timeout of its
	// own (each request's timeout applies). Its Transport carries the
	// requests (http.DefaultTransport when nil); its Timeout, Jar and
	// CheckRedirect are not used: a replica's redirect goes to the client,
	// as from any reverse proxy, with a Location into the replica's server
	// rewritten below the deployment's route. When its Transport is an
	// *http.Transport (or nil), the server uses a copy of it whose
	// connections tell the ingress when they break, so that a request
	// whose replica is lost while its client is slow to send the body
	// is answered at once; with another RoundTripper such a request
	// waits for the client's next bytes, or for BodyTimeout.
	Client *http.Client

	// MaxBodyBytes bounds one request body (413 beyond it). An actor
	// replica's body is read whole into memory before its call, since its
	// input is decoded into one Go value; a Process replica's body is
	// streamed to its server as it arrives (see RetryBufferBytes). 0 means
	// DefaultMaxBodyBytes, 32 MiB.
	MaxBodyBytes int64
	// MaxBufferedBodyBytes bounds the request body bytes held in memory at
	// once, across requests: the whole bodies of actor replicas' requests
	// and the retry buffers of Process replicas' requests. A request whose
	// share does not fit gets 503 before its body is read: for an actor
	// replica its Content-Length (MaxBodyBytes when it has none), for a
	// Process replica its retry buffer (RetryBufferBytes, or its
	// Content-Length when less). 0 means DefaultMaxBufferedBodyBytes,
	// 256 MiB.
	MaxBufferedBodyBytes int64
	// RetryBufferBytes bounds the first bytes of a Process replica's
	// request body that the ingress keeps while it streams the body to the
	// replica's server, so that a request whose connection fails before
	// the response began can be sent again to another replica of an
	// Idempotent deployment: those bytes, then the rest of the client's
	// body. A longer body is streamed all the same, but once more than
	// this has been sent it cannot be retried, and such a failure answers
	// 502, as with Envoy's per_request_buffer_limit_bytes. 0 means
	// DefaultRetryBufferBytes, 1 MiB; negative means none (only a request
	// whose body was not read yet is retried); a value of MaxBodyBytes or
	// more keeps every body whole, as for actor replicas.
	RetryBufferBytes int64
	// BodyTimeout bounds the time spent waiting for one request body, so
	// that a client sending it slowly cannot hold memory and a connection
	// (and, for a body streamed to a Process replica, the replica's slot)
	// for long (408 when it passes); 0 means DefaultBodyTimeout, 60 s. For
	// a streamed body it counts only the time the ingress waits for the
	// client's bytes, not the time the replica's server takes to read
	// them.
	BodyTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout are those of the http.Server that
	// Serve runs (a server of your own that mounts Handler keeps its own):
	// 0 means 30 s and 120 s. An idle keep-alive connection is closed after
	// IdleTimeout (give or take a sixteenth of it: a busy connection does
	// not move its deadline on every request).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// NetHTTPOnly has Serve's connections served by net/http's server
	// alone. By default Serve serves the plain HTTP/1.1 requests (a
	// common method, an origin-form target, a Host, no Transfer-Encoding,
	// Expect or Upgrade, a body that arrives with its head, within 64 KiB)
	// itself, with the same handler and at a fraction of net/http's cost
	// per request, and hands a connection to net/http's server from its
	// first request that is not one (HTTP/1.0, chunked, 100-continue, TLS,
	// ...). A request's context ends when its client goes away, noticed
	// within about 40 ms for a request served this way.
	NetHTTPOnly bool
}

// The defaults of Options.
const (
	DefaultMaxBodyBytes         = 32 << 20
	DefaultMaxBufferedBodyBytes = 256 << 20
	DefaultRetryBufferBytes     = 1 << 20
	DefaultBodyTimeout          = 60 * time.Second
)

// Server is an HTTP ingress in front of deployments whose replicas each
// own a TPU slice. Create it with New, add deployments with Deploy, serve
// it with Serve (or mount Handler on a server of your own), and stop it
// with Shutdown.
//
// A Server is safe for concurrent use; its zero value is not usable.
type Server struct {
	c         *ray.Cluster
	opts      Options             // with defaults
	bodies    *semaphore.Weighted // bytes of request bodies held in memory
	log       *slog.Logger
	client    *http.Client
	ownClient bool
	// conns carries the requests to Process replicas whose body is in
	// memory when Options.Client is nil (see connPool); nil otherwise.
	conns   *connPool
	metrics *metrics
	handler http.Handler

	// bodiesHeld is what bodies gives out, and retryBuffered the bytes of
	// Process bodies' retry buffers in memory, with their high-water marks
	// (tests read them).
	bodiesHeld, retryBuffered gauge

	mu          sync.RWMutex
	deployments map[string]*deployment
	closing     bool
	httpSrv     *http.Server
	fast        []*fastServer  // one per Serve call, unless NetHTTPOnly
	requests    sync.WaitGroup // requests in flight

	changeMu sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	watchers atomic.Int32  // WaitStatus calls waiting on changed

	// Handle calls (handle.go): id and callToken identify the server to
	// handles that crossed to other processes.
	id, callToken string
	callMu        sync.Mutex
	calls         int           // handle calls in flight
	callsIdle     chan struct{} // closed when calls drops to 0
	callsStopped  bool          // Shutdown is stopping the deployments
	callLnMu      sync.Mutex
	callLn        net.Listener // for calls from worker processes, opened on first use
	callSrv       *http.Server
	callDone      chan struct{}
	callLnClosed  bool
}

// New returns a server whose replicas run on c. The caller keeps
// ownership of c and closes it after Shutdown.
func New(c *ray.Cluster, opts *Options) *Server {
	if opts == nil {
		opts = &Options{}
	}
	s := &Server{c: c, log: opts.Logger, client: opts.Client, deployments: map[string]*deployment{}, changed: make(chan struct{}), opts: *opts}
	s.opts.MaxBodyBytes = cmp.Or(max(s.opts.MaxBodyBytes, 0), DefaultMaxBodyBytes)
	s.opts.MaxBufferedBodyBytes = cmp.Or(max(s.opts.MaxBufferedBodyBytes, 0), DefaultMaxBufferedBodyBytes)
	s.opts.BodyTimeout = cmp.Or(max(s.opts.BodyTimeout, 0), DefaultBodyTimeout)
	s.opts.RetryBufferBytes = cmp.Or(s.opts.RetryBufferBytes, DefaultRetryBufferBytes)
	s.opts.ReadHeaderTimeout = cmp.Or(max(s.opts.ReadHeaderTimeout, 0), 30*time.Second)
	s.opts.IdleTimeout = cmp.Or(max(s.opts.IdleTimeout, 0), 120*time.Second)
	s.bodies = semaphore.NewWeighted(s.opts.MaxBufferedBodyBytes)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		s.ownClient = true
		s.conns = newConnPool()
		s.client = &http.Client{Transport: &http.Transport{
			Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			DialContext: watchDial((&net.Dialer{Timeout: 5 * time.Second}).DialContext),
		}}
	} else if t, ok := cmp.Or[http.RoundTripper](s.client.Transport, http.DefaultTransport).(*http.Transport); ok && t.Dial == nil {
		// A copy whose connections say when they close (see watchedConn).
		t = t.Clone()
		dial := t.DialContext
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		t.DialContext = watchDial(dial)
		c := *s.client
		c.Transport = t
		s.client, s.ownClient = &c, true
	}
	s.metrics = newMetrics(s)
	s.handler = s.httpRoutes()
	s.register()
	return s
}

// deployment is the running state of one Deployment.
type deployment struct {
	s         *Server
	spec      Deployment
	ctx       context.Context // ends when the deployment is removed
	cancel    context.CancelFunc
	forced    chan struct{} // closed when a shutdown stops waiting for drains
	force     sync.Once
	stopLoops context.CancelFunc
	reserved  chan struct{} // closed and replaced when a replica reserves its slice
	window    *window
	wg        sync.WaitGroup // replica starts, stops, drains and watchers
	loops     sync.WaitGroup // autoscaler and health checker

	mu          sync.Mutex
	replicas    []*replica
	waiters     []*waiter
	closing     bool
	target      int
	seq         int
	scaler      scaler
	failures    int
	lastErr     error
	backoff     time.Duration
	retryAt     time.Time
	retryTimer  *time.Timer
	lastScaleUp time.Duration
	deployed    bool   // the initial replicas were asked for
	served      bool   // a replica of it has been ready (see outageLocked)
	modelSeq    uint64 // counts model uses, for LRU order
	created     time.Time

	deleting bool // Delete is removing it; guarded by s.mu
	updating bool // a Deploy of its name is starting a new version; guarded by s.mu
	version  int  // 1, then one more at every update
	// During a rolling update (guarded by d.mu): next is the new version
	// beside the old one d, whose replicas take d's requests too; prev is
	// the old version beside the new one d, whose queue d's replicas serve;
	// rolling stops the autoscaler while the update sets the target.
	next, prev *deployment
	rolling    bool
	// users counts the requests and handle calls that found the
	// deployment under s.mu and have not finished: an update waits for
	// them before it stops the old version.
	users sync.WaitGroup
}

// Deploy validates d, starts its MinReplicas replicas and waits until they
// are ready. A wrong field is an InvalidArgument error naming it; MinReplicas
// whole-slice replicas the cluster can never hold (fewer slices of the
// shape than that, counting what the backend can provision) fail at once
// with Infeasible. When ctx ends first, Deploy returns an error wrapping
// ctx.Err() that says how many replicas were ready, what the others wait
// for and how the cluster's slices of their shape stand. A deployment whose
// replicas cannot start at all (a shape the cluster does not have, an
// actor constructor that fails) fails with the reason. Whenever Deploy
// returns an error, the deployment was removed and holds no slice.
//
// A Deploy of a name the server has updates that deployment, rolling
// within d.RollingUpdate: the new version's replicas start as MaxSurge
// leaves room, old ones drain as new ones become ready (keeping
// MinReplicas-MaxUnavailable ready), requests go to the ready replicas of
// both meanwhile, and once the new version's MinReplicas are ready the old
// one drains and stops (see docs/serve.md); if the new version cannot
// start, it is removed and the old one serves on with its replicas.
func (s *Server) Deploy(ctx context.Context, d Deployment) error {
	spec, err := d.normalize()
	if err != nil {
		return err
	}
	if err := s.checkFeasible(ctx, spec); err != nil {
		return err
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	dep := &deployment{
		s: s, spec: spec, ctx: dctx, cancel: cancel, forced: make(chan struct{}), version: 1, created: time.Now(),
		window: newWindow(10 * time.Second), target: spec.MinReplicas, reserved: make(chan struct{}),
	}
	if a := spec.Autoscaling; a != nil {
		dep.scaler = scaler{cfg: *a, min: spec.MinReplicas, max: spec.MaxReplicas}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		return codeErr(ray.FailedPrecondition, "serve: deploy %q: the server is shut down: %w", d.Name, ray.ErrClosed)
	}
	old := s.deployments[spec.Name]
	if err := s.modelsTakenLocked(spec); err != nil {
		s.mu.Unlock()
		cancel()
		return err
	}
	switch {
	case old == nil:
		s.deployments[spec.Name] = dep
	case old.deleting:
		s.mu.Unlock()
		cancel()
		return codeErr(ray.FailedPrecondition, "serve: deploy %q: the deployment of that name is being deleted; deploy again once Delete returned", spec.Name)
	case old.updating:
		s.mu.Unlock()
		cancel()
		return codeErr(ray.FailedPrecondition, "serve: deploy %q: another Deploy of that name is updating it; deploy again once it returned", spec.Name)
	default:
		// An update: the new version starts beside the old one, which
		// serves until the new one is ready (see update).
		old.updating = true
		dep.version = old.version + 1
		defer func() {
			s.mu.Lock()
			old.updating = false
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()

	dep.mu.Lock()
	if old != nil {
		// The rolling update sets the new version's target (see rollOut).
		dep.target, dep.rolling, dep.prev = 0, true, old
	} else {
		dep.reconcileLocked()
		dep.deployed = true
	}
	dep.mu.Unlock()
	lctx, stopLoops := context.WithCancel(dctx)
	dep.stopLoops = stopLoops
	dep.loops.Go(func() { dep.healthLoop(lctx) })
	if spec.Autoscaling != nil {
		dep.loops.Go(func() { dep.autoscale(lctx) })
	}
	if old != nil {
		return s.rollOut(ctx, old, dep)
	}
	err = s.WaitStatus(ctx, func(Status) bool {
		return dep.readyCount() >= spec.MinReplicas || permanent(dep.startErr())
	})
	if err == nil {
		err = dep.startErr()
		if !permanent(err) {
			return nil
		}
		s.mu.Lock()
		if s.deployments[spec.Name] == dep {
			delete(s.deployments, spec.Name)
		}
		s.mu.Unlock()
		dep.shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("serve: deploy %q: %w", spec.Name, err)
	}
	// Nothing is left behind a failed Deploy: the replicas that started
	// and the slices they hold are released before it returns (an update's
	// old version serves on).
	dep.mu.Lock()
	ds := dep.statusLocked(time.Now())
	dep.mu.Unlock()
	waited := s.waitedFor(ctx, spec, ds)
	s.mu.Lock()
	if s.deployments[spec.Name] == dep {
		delete(s.deployments, spec.Name)
	}
	s.mu.Unlock()
	dep.shutdown(context.WithoutCancel(ctx))
	s.notify()
	return fmt.Errorf("serve: deploy %q: %s; the deployment was removed and holds nothing: %w", spec.Name, waited, err)
}

// checkFeasible fails with Infeasible when the cluster can never hold the
// deployment's MinReplicas whole-slice replicas: when it has fewer slices
// of the shape than that (busy ones count: they may be freed), the backend
// is asked whether MinReplicas slices could ever be reserved at once, so
// that what capacity on demand can make counts where the backend
// provisions. A backend without slices, or a deployment of chips
// (ChipsPerReplica), is left to its replicas' own reservations.
func (s *Server) checkFeasible(ctx context.Context, spec Deployment) error {
	if spec.ChipsPerReplica != 0 || len(spec.Resources) > 0 || spec.MinReplicas < 2 {
		return nil // one replica's own reservation fails at once with Infeasible
	}
	states, err := ray.TPUSlices(ctx, s.c)
	if err != nil {
		return nil
	}
	shape, _ := spec.shape() // validated by normalize
	have := 0
	for _, st := range states {
		if g, err := tpu.ParseGeneration(st.Generation); err == nil && g == shape.Generation && st.Topology == spec.Topology && st.ChipsPerHost == shape.ChipsPerHost {
			have++
		}
	}
	if have >= spec.MinReplicas {
		return nil
	}
	probe := spec.sliceSpec(spec.Name + "-feasibility")
	probe.NumSlices, probe.Timeout = spec.MinReplicas, time.Second // bounds the wait only when feasible (ReserveSlices says Infeasible before it waits)
	spg, err := ray.NewSlicePlacementGroup(ctx, s.c, probe)
	if err == nil {
		_ = spg.Release(context.WithoutCancel(ctx)) // made on demand in time: feasible
		return nil
	}
	if ray.CodeOf(err) != ray.Infeasible {
		return nil
	}
	return &backend.Error{Code: backend.Infeasible, Op: fmt.Sprintf("serve: deploy %q", spec.Name),
		Err: fmt.Errorf("Deployment.MinReplicas %d can never be held: each replica holds a %s %s slice, and the cluster has %d of that shape (%w); lower MinReplicas to at most %d, or add slices",
			spec.MinReplicas, spec.Accelerator, spec.Topology, have, err, have)}
}

// readyCount is the number of d's ready replicas.
func (d *deployment) readyCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.replicas {
		if r.state == stateReady {
			n++
		}
	}
	return n
}

// rollOut replaces the running version old of a deployment by nd, the new
// version, replica by replica within nd's RollingUpdate: nd's replicas
// start as the surge leaves room, old's drain as nd's become ready, and
// meanwhile old's requests go to the ready replicas of both. Once nd's
// MinReplicas are ready, update makes nd the deployment. When nd cannot
// start (ctx ends, its constructor fails), nd is removed, holding
// nothing, and old gets its replicas back and serves on.
func (s *Server) rollOut(ctx context.Context, old, nd *deployment) error {
	old.mu.Lock()
	before := old.target
	old.next, old.rolling = nd, true
	old.mu.Unlock()
	s.watchers.Add(1)
	var err error
	for {
		s.changeMu.Lock()
		ch := s.changed
		s.changeMu.Unlock()
		var done bool
		if done, err = rollStep(old, nd); done || err != nil {
			break
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
			err = ctx.Err()
		}
		break
	}
	s.watchers.Add(-1)
	if err == nil {
		nd.mu.Lock()
		nd.rolling, nd.deployed = false, true
		nd.mu.Unlock()
		err = s.update(ctx, old, nd)
		nd.mu.Lock()
		nd.prev = nil
		nd.mu.Unlock()
		return err
	}
	// The old version serves on with its replicas back.
	old.mu.Lock()
	gone := old.closing
	old.next, old.rolling, old.target = nil, false, max(old.target, before)
	old.reconcileLocked()
	old.mu.Unlock()
	if gone {
		nd.shutdown(context.WithoutCancel(ctx))
		return err
	}
	nd.mu.Lock()
	ds := nd.statusLocked(time.Now())
	nd.mu.Unlock()
	name := nd.spec.Name
	if permanent(err) {
		nd.shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("serve: deploy %q: the new version: %w; it was removed and holds nothing, and the version deployed before serves on", name, err)
	}
	waited := s.waitedFor(ctx, nd.spec, ds)
	nd.shutdown(context.WithoutCancel(ctx))
	s.notify()
	return fmt.Errorf("serve: deploy %q: the new version: %s; it was removed and holds nothing, and the version deployed before serves on: %w", name, waited, err)
}

// rollStep moves a rolling update from old to nd one step: nd's target
// grows as far as MinReplicas+MaxSurge leaves room beside the replicas old
// still has (draining ones hold their slices until they stop), and old's
// shrinks as far as the ready replicas of both stay at least
// MinReplicas-MaxUnavailable. It reports done once nd's MinReplicas are
// ready, and an error when nd cannot start or old is going away.
func rollStep(old, nd *deployment) (done bool, err error) {
	if err := nd.startErr(); permanent(err) {
		return false, err
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	if old.closing {
		return false, codeErr(ray.FailedPrecondition, "serve: deploy %q: the deployment was deleted (or the server shut down) while its new version started", nd.spec.Name)
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	n, u := nd.spec.MinReplicas, nd.spec.RollingUpdate
	ready := 0
	for _, r := range nd.replicas {
		if r.state == stateReady {
			ready++
		}
	}
	if ready >= n {
		return true, nil
	}
	if t := min(n, max(nd.target, n+u.MaxSurge-len(old.replicas))); t != nd.target {
		nd.target = t
		nd.reconcileLocked()
	}
	if t := min(old.target, max(0, n-u.MaxUnavailable-ready)); t != old.target {
		old.target = t
		old.reconcileLocked()
	}
	return false, nil
}

// update replaces old by nd, whose MinReplicas are ready: requests that
// look the name up from now on reach nd; those that reached old before
// (handling, queued, or between the two) finish on old, whose replicas
// then drain and stop. No request fails for the update.
func (s *Server) update(ctx context.Context, old, nd *deployment) error {
	name := nd.spec.Name
	s.mu.Lock()
	if s.closing || old.deleting || s.deployments[name] != old {
		s.mu.Unlock()
		old.mu.Lock()
		old.next = nil
		old.mu.Unlock()
		nd.shutdown(context.WithoutCancel(ctx))
		return codeErr(ray.FailedPrecondition, "serve: deploy %q: the deployment was deleted (or the server shut down) while its new version started; the new version was removed", name)
	}
	s.deployments[name] = nd
	s.mu.Unlock()
	s.notify()
	old.users.Wait() // no new user can find old now
	old.shutdown(ctx)
	s.log.Info("serve: deployment updated", "deployment", name)
	return nil
}

// Delete removes the deployment name: new requests for it are answered
// 503 with Retry-After while it goes (handle calls fail with
// ErrShuttingDown) and 404 once it is gone; queued requests get 503; the
// requests its replicas are handling finish (each replica waits at most
// DrainTimeout), then its replicas stop and their slices, chips or
// resources are released. When ctx ends first, the rest is stopped at
// once, still releasing everything, and Delete returns ctx.Err(). Delete of
// a name the server does not have is a NotFound error; of one being
// deleted, FailedPrecondition.
func (s *Server) Delete(ctx context.Context, name string) error {
	s.mu.Lock()
	d := s.deployments[name]
	switch {
	case d == nil:
		s.mu.Unlock()
		return codeErr(ray.NotFound, "serve: delete %q: no such deployment (see Status)", name)
	case d.deleting:
		s.mu.Unlock()
		return codeErr(ray.FailedPrecondition, "serve: delete %q: it is being deleted already", name)
	}
	d.deleting = true
	s.mu.Unlock()
	s.notify()
	d.shutdown(ctx)
	s.mu.Lock()
	if s.deployments[name] == d {
		delete(s.deployments, name)
	}
	s.mu.Unlock()
	s.notify()
	if err := ctx.Err(); err != nil {
		return codeErr(ray.CodeOf(err), "serve: delete %q: stopped its replicas at once: %w", name, err)
	}
	return nil
}

// waitedFor says what a Deploy whose context ended was waiting for: how
// many replicas were ready, how many were waiting for a slice, how the
// cluster's slices of the replicas' shape stood, and the last start error.
func (s *Server) waitedFor(ctx context.Context, spec Deployment, ds DeploymentStatus) string {
	starting := 0
	for _, r := range ds.Replicas {
		if r.State == "STARTING" {
			starting++
		}
	}
	if spec.ChipsPerReplica > 0 {
		return s.waitedForChips(ctx, spec, ds, starting)
	}
	if len(spec.Resources) > 0 {
		msg := fmt.Sprintf("%d of %d replicas (MinReplicas) ready, %d starting, each waiting for %v on one node", ds.Ready, spec.MinReplicas, starting, spec.Resources)
		if ds.LastError != "" {
			msg += "; last start error: " + ds.LastError
		}
		return msg
	}
	msg := fmt.Sprintf("%d of %d replicas (MinReplicas) ready, %d starting, each waiting for a %s %s slice",
		ds.Ready, spec.MinReplicas, starting, spec.Accelerator, spec.Topology)
	if states, err := ray.TPUSlices(context.WithoutCancel(ctx), s.c); err == nil {
		var total, free, busy, broken int
		want, _ := tpu.ParseGeneration(spec.Accelerator) // validated by Deploy
		for _, st := range states {
			if g, err := tpu.ParseGeneration(st.Generation); err != nil || g != want || st.Topology != spec.Topology {
				continue
			}
			total++
			switch {
			case !st.Intact:
				broken++
			case st.Idle:
				free++
			default:
				busy++
			}
		}
		msg += fmt.Sprintf(" (the cluster has %d slices of that shape: %d free, %d busy, %d broken)", total, free, busy, broken)
	}
	if ds.LastError != "" {
		msg += "; last start error: " + ds.LastError
	}
	return msg
}

// waitedForChips is waitedFor for replicas of ChipsPerReplica: the
// chips they wait for and how many the cluster's hosts of the shape have
// free.
func (s *Server) waitedForChips(ctx context.Context, spec Deployment, ds DeploymentStatus, starting int) string {
	msg := fmt.Sprintf("%d of %d replicas (MinReplicas) ready, %d starting, each waiting for %d %s of a %s %s host",
		ds.Ready, spec.MinReplicas, starting, spec.ChipsPerReplica, plural(spec.ChipsPerReplica, "chip", "chips"), spec.Accelerator, spec.Topology)
	shape, err := spec.shape()
	if err != nil {
		return msg
	}
	if st, err := s.c.Snapshot(context.WithoutCancel(ctx)); err == nil {
		hosts, free, fit := 0, 0, 0
		for _, n := range st.Nodes {
			if !n.Alive || n.Labels[tpu.LabelGKEAccelerator] != shape.GKEAccelerator() || n.Labels[tpu.LabelGKETopology] != shape.Topology.String() {
				continue
			}
			hosts++
			f := int(n.Free[ray.TPU])
			free += f
			fit += f / spec.ChipsPerReplica
		}
		msg += fmt.Sprintf(" (live hosts of that shape: %d, with %d %s free, room for %d more %s)",
			hosts, free, plural(free, "chip", "chips"), fit, plural(fit, "replica", "replicas"))
	}
	if ds.LastError != "" {
		msg += "; last start error: " + ds.LastError
	}
	return msg
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (d *deployment) startErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// permanent reports a start failure that retrying cannot fix.
func permanent(err error) bool {
	switch ray.CodeOf(err) {
	case ray.InvalidArgument, ray.Infeasible, ray.NotFound, ray.ActorDied, ray.TaskFailed:
		return true
	}
	return false
}

// Status returns the state of every deployment, sorted by name.
func (s *Server) Status() Status {
	s.mu.RLock()
	deps := make([]*deployment, 0, len(s.deployments))
	for _, d := range s.deployments {
		deps = append(deps, d)
	}
	closing := s.closing
	s.mu.RUnlock()
	slices.SortFunc(deps, func(a, b *deployment) int { return cmp.Compare(a.spec.Name, b.spec.Name) })
	now := time.Now()
	st := Status{ShuttingDown: closing, Deployments: make([]DeploymentStatus, len(deps))}
	for i, d := range deps {
		d.mu.Lock()
		st.Deployments[i] = d.statusLocked(now)
		d.mu.Unlock()
	}
	return st
}

// WaitStatus blocks until cond holds for the server's status, re-checking
// at every change of a replica's state, or ctx ends. Tests and readiness
// gates use it to wait for a scale-up, a replacement or a drain without
// sleeping.
func (s *Server) WaitStatus(ctx context.Context, cond func(Status) bool) error {
	s.watchers.Add(1)
	defer s.watchers.Add(-1)
	for {
		s.changeMu.Lock()
		ch := s.changed
		s.changeMu.Unlock()
		if cond(s.Status()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// changedLocked wakes WaitStatus. d.mu may be held.
func (d *deployment) changedLocked() { d.s.notify() }

// notify wakes WaitStatus.
func (s *Server) notify() {
	if s.watchers.Load() == 0 {
		return
	}
	s.changeMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.changeMu.Unlock()
}

// Serve accepts HTTP connections on l until Shutdown. It returns
// http.ErrServerClosed after Shutdown.
//
// Plain HTTP/1.1 requests are served by Serve itself, with Handler, at a
// fraction of net/http's cost per request; a connection goes to an
// http.Server (with the same handler, ReadHeaderTimeout and IdleTimeout)
// from its first request that is not plain (HTTP/1.0, a chunked or late
// body, 100-continue, an upgrade, TLS, ...). Options.NetHTTPOnly turns
// this off; docs/serve.md lists what is served which way.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	if s.httpSrv == nil {
		s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: s.opts.ReadHeaderTimeout, IdleTimeout: s.opts.IdleTimeout,
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			// Every request reaches the handler, which takes its
			// connection's note of it (see framedConn).
			ConnContext: connContext, DisableGeneralOptionsHandler: true}
	}
	srv := s.httpSrv
	if s.opts.NetHTTPOnly {
		s.mu.Unlock()
		return srv.Serve(framedListener{l})
	}
	fs := newFastServer(l, srv, func(c net.Conn) net.Conn { return &framedConn{Conn: c} })
	s.fast = append(s.fast, fs)
	s.mu.Unlock()
	return fs.serve()
}

// Handler returns the ingress: POST /<deployment> (JSON), POST
// /<deployment>/stream (server-sent events), /<deployment>/<path> for
// Process deployments, GET /-/status, GET /-/metrics and GET /-/healthz.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown stops taking requests (new ones get 503), waits for the requests
// in flight to finish, then drains and stops every replica and releases
// its slice. When ctx ends first, it stops the rest at once, still
// releasing every slice, and returns ctx.Err().
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	srv := s.httpSrv
	fast := s.fast
	deps := make([]*deployment, 0, len(s.deployments))
	for _, d := range s.deployments {
		deps = append(deps, d)
	}
	s.mu.Unlock()
	s.notify()

	var errs []error
	var errMu sync.Mutex
	var stopping sync.WaitGroup
	for _, fs := range fast {
		stopping.Go(func() {
			if err := fs.shutdown(ctx); err != nil && err != ctx.Err() {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		})
	}
	if srv != nil {
		if err := srv.Shutdown(ctx); err != nil {
			errMu.Lock()
			errs = append(errs, err)
			errMu.Unlock()
		}
	}
	stopping.Wait()
	if len(fast) > 0 && srv != nil && len(errs) == 0 && ctx.Err() != nil {
		errs = append(errs, ctx.Err()) // connections of Serve's own were still open
	}
	done := make(chan struct{})
	go func() { s.requests.Wait(); close(done) }()
	select {
	case <-done:
		if err := s.stopCalls(ctx); err != nil {
			errs = append(errs, err)
		}
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
		_ = s.stopCalls(ctx)
	}
	var wg sync.WaitGroup
	for _, d := range deps {
		wg.Go(func() { d.shutdown(ctx) })
	}
	wg.Wait()
	<-done
	s.closeCalls()
	if srv != nil {
		_ = srv.Close()
	}
	for _, fs := range fast {
		fs.close()
	}
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	if s.conns != nil {
		s.conns.close()
	}
	return errors.Join(errs...)
}

// shutdown drains and stops every replica of d.
func (d *deployment) shutdown(ctx context.Context) {
	d.mu.Lock()
	d.closing = true
	d.closeQueueLocked()
	if d.retryTimer != nil {
		d.retryTimer.Stop()
		d.retryTimer = nil
	}
	for _, r := range d.replicas {
		switch r.state {
		case stateStarting:
			r.state, r.reason = stateStopping, "shutdown"
			r.cancel()
		case stateReady:
			d.drainLocked(r, "shutdown")
		}
	}
	d.mu.Unlock()
	d.stopLoops()
	d.loops.Wait()
	stop := context.AfterFunc(ctx, func() { d.force.Do(func() { close(d.forced) }) })
	defer stop()
	d.wg.Wait()
	d.cancel()
}
