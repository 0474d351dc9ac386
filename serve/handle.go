package serve

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/worker"
)

// Composition: a deployment calls another through a typed
// DeploymentHandle, Ray Serve's DeploymentHandle. A call goes through the
// callee's router exactly as POST /<name> does (replica choice, limits,
// queue, retries, timeout, metrics). A handle is a value that crosses to
// replicas as JSON (in an actor's constructor input, or a method's): in
// the process of the Server (the driver, or the in-process simulator's
// actors) it calls the router directly; in a worker process or a pod it
// calls back to the driver's router over HTTP, on a listener the Server
// opens at ray.DriverHost the first time a handle or Router crosses.

// The kinds of CallError, carried across processes.
const (
	kindOverloaded = "overloaded"
	kindShutdown   = "shutting-down"
	kindNotFound   = "no-deployment"
	kindBadCall    = "bad-call"
	kindLost       = "replica-lost"
	kindTimeout    = "timeout"
	kindCanceled   = "canceled"
	kindFailed     = "failed"
	kindInternal   = "internal"
	kindUnreached  = "unreachable"
	kindNoReplica  = "no-replica"
)

// The errors of handle calls, besides [ErrOverloaded] and
// [ErrShuttingDown]; match them with errors.Is.
var (
	// ErrNoDeployment: the server has no deployment of that name.
	ErrNoDeployment error = &backend.Error{Code: backend.NotFound, Err: errors.New("no such deployment")}
	// ErrBadCall: the call does not fit the deployment: the handle's
	// types are not its endpoint's, it has no request endpoint (Unary or
	// Batched), or it is a Process deployment.
	ErrBadCall error = &backend.Error{Code: backend.InvalidArgument, Err: errors.New("the call does not fit the deployment's endpoint")}
	// ErrReplicaLost: the replica serving the call was lost (its actor or
	// host died) and the call was not retried: the deployment is not
	// Idempotent, or MaxRetries ran out.
	ErrReplicaLost error = &backend.Error{Code: backend.Unavailable, Err: errors.New("the replica serving the call was lost")}
	// ErrRouterUnreachable: a handle in a worker process could not reach
	// the driver's router (or lost the connection before the answer).
	ErrRouterUnreachable error = &backend.Error{Code: backend.Unavailable, Err: errors.New("the driver's router could not be reached")}
)

// CallError is the error of a handle call that the router refused or the
// callee failed. Code is the HTTP status an HTTP client would get for the
// same failure (400, 404, 500, 502, 503, 504); errors.Is matches
// [ErrOverloaded], [ErrShuttingDown], [ErrNoDeployment], [ErrBadCall],
// [ErrReplicaLost], [ErrNoReplica], [ErrRouterUnreachable],
// ray.ErrTaskFailed (the callee's code returned an error or panicked) and
// context.DeadlineExceeded (the callee's RequestTimeout passed). A call
// whose own context ends returns ctx.Err() itself, not a CallError.
type CallError struct {
	// Deployment is the callee.
	Deployment string
	// Code is the HTTP status of the same failure of POST /<Deployment>.
	Code int
	// Message says what failed.
	Message string

	kind string
}

func (e *CallError) Error() string {
	msg := e.Message
	if !strings.Contains(msg, fmt.Sprintf("deployment %q", e.Deployment)) {
		msg = fmt.Sprintf("deployment %q: %s", e.Deployment, msg)
	}
	return fmt.Sprintf("serve: %s (status %d)", msg, e.Code)
}

// Unwrap returns the error's goray code, for ray.CodeOf and errors.Is: the
// code of its status (see [StatusOf]) for a method's error that chose one,
// TaskFailed for another method error, ResourceExhausted when the
// deployment is overloaded, Unavailable when it is shutting down, its
// replica was lost or the router could not be reached, NotFound for no
// deployment, InvalidArgument for a bad call, DeadlineExceeded and
// Canceled, Internal otherwise.
func (e *CallError) Unwrap() error {
	return &backend.Error{Code: e.rayCode(), Op: "serve: deployment " + strconv.Quote(e.Deployment), Err: errors.New(e.Message)}
}

func (e *CallError) rayCode() ray.ErrorCode {
	switch e.kind {
	case kindOverloaded:
		return ray.ResourceExhausted
	case kindShutdown, kindLost, kindUnreached, kindNoReplica:
		return ray.Unavailable
	case kindNotFound:
		return ray.NotFound
	case kindBadCall:
		return ray.InvalidArgument
	case kindTimeout:
		return ray.DeadlineExceeded
	case kindCanceled:
		return ray.Canceled
	case kindFailed:
		if e.Code != http.StatusInternalServerError {
			return codeOfStatus(e.Code)
		}
		return ray.TaskFailed
	}
	return codeOfStatus(e.Code)
}

// Is matches the sentinel of the error's kind.
func (e *CallError) Is(target error) bool {
	switch e.kind {
	case kindOverloaded:
		return target == ErrOverloaded
	case kindShutdown:
		return target == ErrShuttingDown
	case kindNotFound:
		return target == ErrNoDeployment
	case kindBadCall:
		return target == ErrBadCall
	case kindLost:
		return target == ErrReplicaLost
	case kindTimeout:
		return target == context.DeadlineExceeded
	case kindCanceled:
		return target == context.Canceled
	case kindFailed:
		return target == ray.ErrTaskFailed
	case kindUnreached:
		return target == ErrRouterUnreachable
	case kindNoReplica:
		return target == ErrNoReplica
	}
	return false
}

// typeInfo names a type for handle checks: Name for messages, Key (its
// full description: import path and exported fields) for comparison.
type typeInfo struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// typeInfos caches describeType, which every call needs.
var typeInfos sync.Map // reflect.Type → typeInfo

func describeType(t reflect.Type) typeInfo {
	if ti, ok := typeInfos.Load(t); ok {
		return ti.(typeInfo)
	}
	ti := typeInfo{Name: t.String(), Key: worker.TypeString(t)}
	typeInfos.Store(t, ti)
	return ti
}

// endpointInfo describes a deployment's request endpoint for handles.
type endpointInfo struct {
	desc    string // "serve.Unary(class.method)"
	in, out typeInfo
}

// callTarget is implemented by replicas whose request endpoint handles can
// call ([Actor]).
type callTarget interface {
	endpoint() (endpointInfo, bool)
}

// callRequest is one handle call, as it crosses to the driver's router.
type callRequest struct {
	Deployment string   `json:"deployment"`
	In         typeInfo `json:"in"`
	Out        typeInfo `json:"out"`
	// TimeoutMillis is what was left of the caller's deadline; 0 for
	// none.
	TimeoutMillis int64           `json:"timeoutMillis,omitempty"`
	Body          json.RawMessage `json:"body"`
	// ModelID is the call's model on a multiplexed deployment.
	ModelID string `json:"modelID,omitempty"`
}

// callFailure is a CallError as it crosses back.
type callFailure struct {
	Code  int    `json:"code"`
	Kind  string `json:"kind"`
	Error string `json:"error"`
}

// Routes is where [Handle] finds deployments: a *[Server] in its own
// process, or a [Router] anywhere (a Router crosses to replicas).
type Routes interface {
	routes() Router
}

// Router reaches a Server's router from any process: get it with
// [Server.Router] and pass it to a replica (in its actor's constructor
// input, or a method's input) so that code there can get handles by name
// with [Handle]. It crosses as JSON: the server's ID, the address of the
// listener the Server opens for calls from worker processes, and a random
// token that authenticates them. In the Server's own process it calls the
// router directly. The zero Router reaches nothing.
type Router struct {
	s   *Server    // in the server's process
	ref *routerRef // elsewhere
}

type routerRef struct {
	Server string `json:"server"`
	Addr   string `json:"addr"`
	Token  string `json:"token"`
}

func (r Router) routes() Router { return r }

// Router returns a Router to s, to pass to replicas.
func (s *Server) Router() Router { return Router{s: s} }

func (s *Server) routes() Router { return s.Router() }

// servers are this process's servers by ID, so that a handle that crossed
// as JSON into the process of its server (the in-process simulator) calls
// the router directly.
var servers sync.Map // id → weak.Pointer[Server]

func (s *Server) register() {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s.id = hex.EncodeToString(b[:])
	_, _ = rand.Read(b[:])
	s.callToken = hex.EncodeToString(b[:])
	servers.Store(s.id, weak.Make(s))
	runtime.AddCleanup(s, func(id string) { servers.Delete(id) }, s.id)
}

func lookupServer(id string) *Server {
	if p, ok := servers.Load(id); ok {
		return p.(weak.Pointer[Server]).Value()
	}
	return nil
}

// MarshalJSON encodes the router's reference, opening the Server's
// listener for calls from other processes on first use.
func (r Router) MarshalJSON() ([]byte, error) {
	ref := r.ref
	if r.s != nil {
		addr, err := r.s.callAddr()
		if err != nil {
			return nil, err
		}
		ref = &routerRef{Server: r.s.id, Addr: addr, Token: r.s.callToken}
	}
	if ref == nil {
		return []byte("null"), nil
	}
	return json.Marshal(ref)
}

// UnmarshalJSON decodes a router's reference; in its server's own process
// the Router calls the server directly.
func (r *Router) UnmarshalJSON(b []byte) error {
	var ref *routerRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return fmt.Errorf("serve.Router: %w", err)
	}
	*r = Router{}
	if ref == nil {
		return nil
	}
	if s := lookupServer(ref.Server); s != nil {
		r.s = s
		return nil
	}
	r.ref = ref
	return nil
}

func (r Router) valid() bool { return r.s != nil || r.ref != nil }

// call routes one call: directly in the server's process, else over HTTP
// to the driver.
func (r Router) call(ctx context.Context, req *callRequest) ([]byte, error) {
	if r.s != nil {
		out, e := r.s.call(ctx, req)
		if e != nil {
			return nil, e
		}
		return out, nil
	}
	return r.ref.call(ctx, req)
}

// DeploymentHandle calls the request endpoint ([Unary] or [Batched]) of
// one deployment with Go values: Ray Serve's DeploymentHandle. Get one
// with [Handle]. A call goes through the callee's router as POST
// /<deployment> does: power of two choices among its ready replicas,
// MaxConcurrentRequests, the queue (a full one fails the call with
// [ErrOverloaded] at once), RequestTimeout (bounded by the caller's
// deadline too), retries on another replica when a replica is lost and the
// deployment is Idempotent, batching, and the deployment's metrics.
//
// A handle is a small value, safe for concurrent use, that crosses to
// other processes as JSON: pass it to a replica in its actor's constructor
// input (or a method's input) and call it there. In the Server's process
// it calls the router directly; in a worker process or pod it calls the
// driver's router over HTTP. The zero DeploymentHandle fails every call.
type DeploymentHandle[I, O any] struct {
	r          Router
	deployment string
	model      string
}

// WithModelID returns a copy of the handle whose calls name the model id,
// as Ray Serve's handle.options(multiplexed_model_id=id): on a
// multiplexed deployment they go to a replica that has it loaded (or
// loads it), and an input type embedding [MultiplexedModel] receives it.
// "" names none.
func (h DeploymentHandle[I, O]) WithModelID(id string) DeploymentHandle[I, O] {
	h.model = id
	return h
}

// ModelID returns the model the handle's calls name ("" for none).
func (h DeploymentHandle[I, O]) ModelID() string { return h.model }

// Handle returns a handle to the request endpoint of deployment, with
// input I and output O, which must be the endpoint's (for [Batched], the
// element types of its method's slices). In the Server's process (r is the
// *Server, or a Router there) it checks at once that the deployment exists
// and takes I and O, and fails with an error matching [ErrNoDeployment] or
// [ErrBadCall] that names the deployments or the endpoint's types; in
// another process the first call reports the same errors.
func Handle[I, O any](r Routes, deployment string) (DeploymentHandle[I, O], error) {
	var zero DeploymentHandle[I, O]
	if r == nil {
		return zero, codeErr(ray.InvalidArgument, "serve.Handle: nil Routes: pass the *serve.Server, or a serve.Router")
	}
	rt := r.routes()
	if !rt.valid() {
		return zero, codeErr(ray.InvalidArgument, "serve.Handle: the Router reaches no server: get one with (*serve.Server).Router")
	}
	if rt.s != nil {
		in, out := describeType(reflect.TypeFor[I]()), describeType(reflect.TypeFor[O]())
		if _, e := rt.s.target(deployment, in, out, false); e != nil {
			return zero, e
		}
	} else if !nameRE.MatchString(deployment) {
		return zero, codeErr(ray.InvalidArgument, "serve.Handle: invalid deployment name %q", deployment)
	}
	return DeploymentHandle[I, O]{r: rt, deployment: deployment}, nil
}

// Deployment returns the name of the callee.
func (h DeploymentHandle[I, O]) Deployment() string { return h.deployment }

// Call calls the deployment's request endpoint with in and returns its
// output. Failures are *[CallError]s (see there for the errors.Is
// sentinels); when ctx ends first Call returns ctx.Err(), and the call
// leaves the callee's queue or frees its replica's slot at once; a [Unary]
// method's context ends too, and with it the calls it makes through
// handles (a [Batched] call goes on while other callers wait for it).
func (h DeploymentHandle[I, O]) Call(ctx context.Context, in I) (O, error) {
	var zero O
	if h.deployment == "" || !h.r.valid() {
		return zero, codeErr(ray.InvalidArgument, "serve: call on the zero DeploymentHandle: get one with serve.Handle")
	}
	if ctx == nil {
		return zero, codeErr(ray.InvalidArgument, "serve: call deployment %q: nil context", h.deployment)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return zero, codeErr(ray.InvalidArgument, "serve: call deployment %q: encode the input %v: %w", h.deployment, reflect.TypeFor[I](), err)
	}
	req := &callRequest{
		Deployment: h.deployment, Body: body, ModelID: h.model,
		In: describeType(reflect.TypeFor[I]()), Out: describeType(reflect.TypeFor[O]()),
	}
	out, err := h.r.call(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		return zero, err
	}
	var o O
	if err := json.Unmarshal(out, &o); err != nil {
		return zero, codeErr(ray.Internal, "serve: call deployment %q: decode its output into %v: %w", h.deployment, reflect.TypeFor[O](), err)
	}
	return o, nil
}

type handleJSON struct {
	Router     Router `json:"router"`
	Deployment string `json:"deployment"`
	Model      string `json:"model,omitempty"`
}

// MarshalJSON encodes the handle so that it can cross to a replica.
func (h DeploymentHandle[I, O]) MarshalJSON() ([]byte, error) {
	if h.deployment == "" {
		return []byte("null"), nil
	}
	return json.Marshal(handleJSON{Router: h.r, Deployment: h.deployment, Model: h.model})
}

// UnmarshalJSON decodes a handle that crossed from another process.
func (h *DeploymentHandle[I, O]) UnmarshalJSON(b []byte) error {
	var j *handleJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return codeErr(ray.InvalidArgument, "serve.DeploymentHandle: %w", err)
	}
	*h = DeploymentHandle[I, O]{}
	if j != nil {
		h.r, h.deployment, h.model = j.Router, j.Deployment, j.Model
	}
	return nil
}

// target returns the deployment a call to name with types in and out goes
// to, or the CallError that says why none does.
func (s *Server) target(name string, in, out typeInfo, use bool) (_ *deployment, ce *CallError) {
	s.mu.RLock()
	d := s.deployments[name]
	if d != nil && d.deleting {
		s.mu.RUnlock()
		return nil, &CallError{Deployment: name, Code: http.StatusServiceUnavailable, kind: kindShutdown,
			Message: fmt.Sprintf("deployment %q is being deleted; retry later", name)}
	}
	if d != nil && use {
		// With use, a deployment returned counts the caller among its
		// users until it calls d.users.Done.
		d.users.Add(1)
		defer func() {
			if ce != nil {
				d.users.Done()
			}
		}()
	}
	var names []string
	if d == nil {
		for n := range s.deployments {
			names = append(names, fmt.Sprintf("%q", n))
		}
	}
	s.mu.RUnlock()
	if d == nil {
		slices.Sort(names)
		valid := "it has none"
		if len(names) > 0 {
			valid = "it has " + strings.Join(names, ", ")
		}
		return nil, &CallError{Deployment: name, Code: http.StatusNotFound, kind: kindNotFound,
			Message: fmt.Sprintf("no deployment %q on this server (%s)", name, valid)}
	}
	bad := func(format string, args ...any) *CallError {
		return &CallError{Deployment: name, Code: http.StatusBadRequest, kind: kindBadCall, Message: fmt.Sprintf("deployment %q: ", name) + fmt.Sprintf(format, args...)}
	}
	ct, ok := d.spec.Replica.(callTarget)
	if !ok {
		return nil, bad("it runs a serve.Process server, which handles cannot call: send HTTP to /%s/<path>", name)
	}
	ep, ok := ct.endpoint()
	if !ok {
		return nil, bad("it has no request endpoint for handles (serve.Unary or serve.Batched), only serve.Streaming")
	}
	if in.Key != ep.in.Key || out.Key != ep.out.Key {
		return nil, bad("serve.Handle[%s, %s] does not fit its endpoint %s, which takes %s and returns %s: use serve.Handle[%s, %s]",
			in.Name, out.Name, ep.desc, ep.in.Name, ep.out.Name, ep.in.Name, ep.out.Name)
	}
	return d, nil
}

// call is a handle call in the server's process.
func (s *Server) call(ctx context.Context, req *callRequest) ([]byte, *CallError) {
	d, e := s.target(req.Deployment, req.In, req.Out, true)
	if e != nil {
		return nil, e
	}
	defer d.users.Done()
	if !s.beginCall() {
		return nil, &CallError{Deployment: req.Deployment, Code: http.StatusServiceUnavailable, kind: kindShutdown,
			Message: fmt.Sprintf("deployment %q: the server is shutting down", req.Deployment)}
	}
	defer s.endCall()
	start := time.Now()
	model, e := d.routeModel(req.ModelID)
	if e != nil {
		d.observe(e.Code, start)
		return nil, e
	}
	ctx, cancel := context.WithTimeout(withModel(ctx, model), d.spec.RequestTimeout)
	defer cancel()
	out, e := d.callUnary(ctx, req.Body)
	code := http.StatusOK
	if e != nil {
		code = e.Code
	}
	d.observe(code, start)
	return out, e
}

// beginCall admits a handle call: until Shutdown stops the deployments,
// since the requests and calls in flight that Shutdown waits for make
// calls of their own.
func (s *Server) beginCall() bool {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if s.callsStopped {
		return false
	}
	s.calls++
	return true
}

func (s *Server) endCall() {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	s.calls--
	if s.calls == 0 && s.callsIdle != nil {
		close(s.callsIdle)
		s.callsIdle = nil
	}
}

// stopCalls waits until no handle call is in flight (or ctx ends), then
// refuses new ones.
func (s *Server) stopCalls(ctx context.Context) error {
	for {
		s.callMu.Lock()
		if s.calls == 0 {
			s.callsStopped = true
			s.callMu.Unlock()
			return nil
		}
		if s.callsIdle == nil {
			s.callsIdle = make(chan struct{})
		}
		idle := s.callsIdle
		s.callMu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			s.callMu.Lock()
			s.callsStopped = true
			s.callMu.Unlock()
			return ctx.Err()
		}
	}
}

// callPath is where the Server's call listener takes handle calls.
const callPath = "/goray/serve/v1/call"

// callAddr returns the address of the listener for handle calls from
// other processes, opening it on first use at ray.DriverHost (127.0.0.1
// on the simulator, the driver pod's IP on Kubernetes).
func (s *Server) callAddr() (string, error) {
	s.callLnMu.Lock()
	defer s.callLnMu.Unlock()
	if s.callLn != nil {
		return s.callLn.Addr().String(), nil
	}
	if s.callLnClosed {
		return "", codeErr(ray.FailedPrecondition, "serve: the server is shut down: its Router and handles can no longer cross to replicas: %w", ErrShuttingDown)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := ray.DriverHost(ctx, s.c)
	if err != nil {
		return "", fmt.Errorf("serve: a handle crossing to a replica needs an address where workers reach this process: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("serve: listen for handle calls from replicas on %s: %w", host, err)
	}
	s.callLn = ln
	s.callSrv = &http.Server{Handler: http.HandlerFunc(s.serveCall), ReadHeaderTimeout: s.opts.ReadHeaderTimeout, IdleTimeout: s.opts.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.callDone = make(chan struct{})
	go func() {
		defer close(s.callDone)
		_ = s.callSrv.Serve(ln)
	}()
	s.log.Debug("serve: listening for handle calls from replicas", "addr", ln.Addr().String())
	return ln.Addr().String(), nil
}

// closeCalls closes the listener for handle calls.
func (s *Server) closeCalls() {
	s.callLnMu.Lock()
	s.callLnClosed = true
	srv, done := s.callSrv, s.callDone
	s.callLnMu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
}

// serveCall answers a handle call from another process.
func (s *Server) serveCall(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != callPath || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(s.callToken)) != 1 {
		writeCallFailure(w, &CallError{Code: http.StatusUnauthorized, kind: kindBadCall, Message: "handle call without this server's token"})
		return
	}
	// Read to the end: only then does net/http watch the connection and
	// cancel the call's context when the caller goes away.
	var req callRequest
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes+64<<10))
	if err == nil {
		err = json.Unmarshal(data, &req)
	}
	if err != nil {
		code := http.StatusBadRequest
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			code = http.StatusRequestEntityTooLarge
		}
		writeCallFailure(w, &CallError{Deployment: req.Deployment, Code: code, kind: kindBadCall,
			Message: fmt.Sprintf("read the handle call (input at most %d bytes, Options.MaxBodyBytes): %v", s.opts.MaxBodyBytes, err)})
		return
	}
	ctx := r.Context()
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	out, e := s.call(ctx, &req)
	if e != nil {
		writeCallFailure(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func writeCallFailure(w http.ResponseWriter, e *CallError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(callFailure{Code: e.Code, Kind: e.kind, Error: e.Message})
}

// callClient carries handle calls from worker processes to drivers.
var callClient = &http.Client{Transport: &http.Transport{
	Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
}}

// call sends a handle call to the driver's router.
func (ref *routerRef) call(ctx context.Context, req *callRequest) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = max(1, time.Until(dl).Milliseconds())
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ref.Addr+callPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Authorization", "Bearer "+ref.Token)
	hreq.Header.Set("Content-Type", "application/json")
	unreached := func(err error) error {
		return &CallError{Deployment: req.Deployment, Code: http.StatusBadGateway, kind: kindUnreached,
			Message: fmt.Sprintf("deployment %q: the driver's router at %s: %v", req.Deployment, ref.Addr, err)}
	}
	resp, err := callClient.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unreached(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unreached(err)
	}
	if resp.StatusCode == http.StatusOK {
		return data, nil
	}
	var f callFailure
	if err := json.Unmarshal(data, &f); err != nil || f.Code == 0 {
		return nil, unreached(fmt.Errorf("answered %s: %.200s", resp.Status, data))
	}
	return nil, &CallError{Deployment: req.Deployment, Code: f.Code, Message: f.Error, kind: f.Kind}
}
