package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/goray-dev/goray/ray"
)

// Replica is what each replica of a deployment runs: an actor class built
// with [Actor], or an external HTTP server process built with [Process].
// The interface is closed; a Replica is immutable and may serve several
// deployments.
type Replica interface {
	validate() error
	// start runs the replica on its reserved slice and returns once it can
	// take requests.
	start(ctx context.Context, c *ray.Cluster, spg placement, maxConcurrent int) (instance, error)
}

// instance is one running replica.
type instance interface {
	// check returns an error when the replica is unhealthy.
	check(ctx context.Context) error
	// close stops the replica's workers; the caller releases the slice.
	close(ctx context.Context)
}

// actorInstance handles typed requests.
type actorInstance interface {
	instance
	unary(ctx context.Context, body []byte) ([]byte, error)
	stream(ctx context.Context, body []byte, emit func([]byte) error) error
	hasUnary() bool
	hasStream() bool
	serveHTTP(ctx context.Context, req Request) (Response, error)
}

// badRequest is an error in the client's request: it is answered with 400
// and never retried.
type badRequest struct{ err error }

func (e badRequest) Error() string { return e.err.Error() }
func (e badRequest) Unwrap() error { return e.err }

// streamFailed is the error a stream's function returned.
type streamFailed struct{ msg string }

func (e streamFailed) Error() string { return e.msg }

// Endpoint is a request handler of actor type A, for [Actor]: [Unary],
// [Streaming] or [Check]. The zero Endpoint adds nothing. Endpoints are
// immutable and safe to share.
type Endpoint[A any] struct {
	apply func(*actorEndpoints[A])
}

type actorEndpoints[A any] struct {
	// unaryCount counts the endpoints (Unary, Batched) that set unary: a
	// deployment may have one.
	unaryCount int
	unary      func(ctx context.Context, h *ray.ActorHandle[A], body []byte) ([]byte, error)
	// unaryEP describes the unary endpoint for handles: its input and
	// output types and how it was declared.
	unaryEP endpointInfo
	stream  func(ctx context.Context, h *ray.ActorHandle[A], body []byte, emit func([]byte) error) error
	check   func(ctx context.Context, h *ray.ActorHandle[A]) error
	http    func(ctx context.Context, h *ray.ActorHandle[A], req Request) (Response, error)
	models  *actorModels[A]
	openai  func(ctx context.Context, h *ray.ActorHandle[A], body []byte, emit func([]byte) error) error
}

// lenientKey marks the context of a call to a deployment with
// AllowUnknownFields.
type lenientKey struct{}

// decodeBody decodes a request body into I: strictly (an unknown field is
// an error) unless ctx says the deployment allows unknown fields.
func decodeBody[I any](ctx context.Context, body []byte) (I, error) {
	var in I
	strict := ctx.Value(lenientKey{}) == nil
	if namesOf(reflect.TypeFor[I]()).fastDecode(body, &in, strict) {
		setModelID(ctx, &in)
		return in, nil
	}
	var zero I
	in = zero // what json.Unmarshal set, if it failed or doubted
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(&in)
	if err == nil && len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
		err = errors.New("data after the JSON value")
	}
	if err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			msg = fmt.Sprintf("unknown field %s (the deployment takes only the fields of %v; Deployment.AllowUnknownFields accepts others)", f, reflect.TypeFor[I]())
		}
		return in, badRequest{fmt.Errorf("request body is not a JSON %v: %s", reflect.TypeFor[I](), msg)}
	}
	setModelID(ctx, &in)
	return in, nil
}

// setModelID sets the router's model ID in an input that takes one
// (never the body's).
func setModelID[I any](ctx context.Context, in *I) {
	if s, ok := any(in).(modelIDSetter); ok {
		s.setMultiplexedModelID(modelOf(ctx))
	}
}

// Unary serves POST /<deployment>: the JSON body is decoded into I, m is
// called on the replica's host-0 actor, and its output is the JSON reply.
//
// The router decodes the body to check it (strictly, unless the
// deployment has AllowUnknownFields); an actor in the router's process
// takes that decoded value, one in another process the body's bytes, and
// the output's encoding comes back as the reply (ray's
// Method.CallJSONDecoded), so that the JSON is not decoded and encoded
// again on the way.
func Unary[A, I, O any](m *ray.Method[A, I, O]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.unaryCount++
		e.unaryEP = endpointInfo{desc: "serve.Unary(" + m.Name() + ")", in: describeType(reflect.TypeFor[I]()), out: describeType(reflect.TypeFor[O]())}
		e.unary = func(ctx context.Context, h *ray.ActorHandle[A], body []byte) ([]byte, error) {
			in, err := decodeBody[I](ctx, body)
			if err != nil {
				return nil, err
			}
			if _, mux := any(&in).(modelIDSetter); mux {
				// The input carries the router's model ID, not the body's:
				// the decoded value crosses.
				if body, err = json.Marshal(in); err != nil {
					return nil, err
				}
			}
			// A caller that went away or timed out cancels the call (best
			// effort): the method's context ends too, and so do the calls
			// it makes through handles. An actor in this process takes
			// the value decoded here (each attempt decodes its own);
			// one elsewhere gets the body's bytes.
			return m.CallJSONDecoded(ctx, h, body, in)
		}
	}}
}

// unaryEndpoint serves POST /<deployment> with call: the JSON body decoded
// into I, the output encoded as the reply (Unary, Batched). desc says how
// it was declared, for errors.
func unaryEndpoint[A, I, O any](desc string, call func(ctx context.Context, h *ray.ActorHandle[A], in I) (O, error)) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.unaryCount++
		e.unaryEP = endpointInfo{desc: desc, in: describeType(reflect.TypeFor[I]()), out: describeType(reflect.TypeFor[O]())}
		e.unary = func(ctx context.Context, h *ray.ActorHandle[A], body []byte) ([]byte, error) {
			in, err := decodeBody[I](ctx, body)
			if err != nil {
				return nil, err
			}
			out, err := call(ctx, h, in)
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		}
	}}
}

// Streaming serves POST /<deployment>/stream: the JSON body is decoded into
// I and each chunk s sends becomes one server-sent event whose data is the
// chunk's JSON.
func Streaming[A, I, O any](s *Stream[A, I, O]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.stream = func(ctx context.Context, h *ray.ActorHandle[A], body []byte, emit func([]byte) error) error {
			in, err := decodeBody[I](ctx, body)
			if err != nil {
				return err
			}
			return runStreamCall(ctx, s, h, in, emit)
		}
	}}
}

// runStreamCall drives the start/next protocol of stream.go from the router.
func runStreamCall[A, I, O any](ctx context.Context, s *Stream[A, I, O], h *ray.ActorHandle[A], in I, emit func([]byte) error) error {
	id := newStreamID()
	startRef := s.start.Remote(ctx, h, streamStart[I]{ID: id, In: in})
	finished := false
	defer func() {
		if !finished {
			// Best effort: stop the stream's function on the replica.
			s.cancel.Remote(context.WithoutCancel(ctx), h, id).Release()
		}
		startRef.Release()
	}()
	for {
		b, err := s.next.Remote(ctx, h, id).Get(ctx)
		if err != nil {
			return err
		}
		for _, c := range b.Chunks {
			data, err := json.Marshal(c)
			if err != nil {
				return err
			}
			if err := emit(data); err != nil {
				return err
			}
		}
		if b.Done {
			finished = true
			if b.Err != "" {
				return streamFailed{b.Err}
			}
			return nil
		}
		if len(b.Chunks) == 0 {
			// A poll came back empty: the stream may have failed to start.
			if ready, _, _ := ray.Wait(expired(ctx), []ray.ObjectRef[struct{}]{startRef}, 1); len(ready) == 1 {
				if _, err := startRef.Get(ctx); err != nil {
					return err
				}
			}
		}
	}
}

// expired returns a context that has already ended, for non-blocking waits.
func expired(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}

// Check adds an application health check: m is called on the host-0 actor
// at every health check, and an error fails the check. Without it, a check
// only asks whether every host's actor is alive.
func Check[A any](m *ray.Method[A, struct{}, struct{}]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.check = func(ctx context.Context, h *ray.ActorHandle[A]) error {
			_, err := m.Remote(ctx, h, struct{}{}).Get(ctx)
			return err
		}
	}}
}

// Actor returns a Replica that runs class on every host of the replica's
// slice, each constructed from init and pinned to its host's bundle (so it
// reads its TPU_WORKER_ID and the rest of the slice's env with
// ray.Runtime). The host-0 actor serves the endpoints; the others are its
// workers. The host-0 actor runs up to 2*MaxConcurrentRequests+2 calls at
// once (a stream holds two), so its methods must be safe for concurrent use.
func Actor[A, CI any](class *ray.ActorClass[A, CI], init CI, endpoints ...Endpoint[A]) Replica {
	r := &actorReplica[A, CI]{class: class, init: init}
	for _, e := range endpoints {
		if e.apply != nil {
			e.apply(&r.eps)
		}
	}
	return r
}

type actorReplica[A, CI any] struct {
	class *ray.ActorClass[A, CI]
	init  CI
	eps   actorEndpoints[A]
}

func (r *actorReplica[A, CI]) validate() error {
	if r.class == nil {
		return errors.New("serve.Actor: nil actor class")
	}
	if r.eps.unary == nil && r.eps.stream == nil && r.eps.http == nil && r.eps.openai == nil {
		return fmt.Errorf("serve.Actor %s: no endpoint: pass serve.Unary (or serve.Batched), serve.Streaming, serve.HTTP and/or serve.OpenAI", r.class.Name())
	}
	if r.eps.unaryCount > 1 {
		return fmt.Errorf("serve.Actor %s: %d endpoints serve POST /<deployment> (serve.Unary, serve.Batched); pass one", r.class.Name(), r.eps.unaryCount)
	}
	return nil
}

func (r *actorReplica[A, CI]) hasHTTP() bool { return r.eps.http != nil }

func (r *actorReplica[A, CI]) endpointSet() endpointSet {
	return endpointSet{unary: r.eps.unary != nil, stream: r.eps.stream != nil}
}

// endpoint describes the request endpoint handles call, if any.
func (r *actorReplica[A, CI]) endpoint() (endpointInfo, bool) {
	return r.eps.unaryEP, r.eps.unary != nil
}

func (r *actorReplica[A, CI]) start(ctx context.Context, c *ray.Cluster, spg placement, maxConcurrent int) (instance, error) {
	pg, per := spg.PlacementGroup(), spg.BundlesPerHost()
	inst := &actorReplicaInstance[A]{eps: &r.eps, hosts: make([]*ray.ActorHandle[A], spg.NumHosts())}
	for i := range inst.hosts {
		conc := ray.MaxConcurrency(2)
		if i == 0 {
			conc = ray.MaxConcurrency(2*maxConcurrent + 2)
		}
		inst.hosts[i] = r.class.Remote(ctx, c, r.init, ray.InBundle(pg, i*per), conc)
	}
	for i, h := range inst.hosts {
		if err := h.Ready(ctx); err != nil {
			inst.close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("actor %s on host %d: %w", r.class.Name(), i, err)
		}
	}
	return inst, nil
}

type actorReplicaInstance[A any] struct {
	eps   *actorEndpoints[A]
	hosts []*ray.ActorHandle[A]
}

func (a *actorReplicaInstance[A]) hasUnary() bool  { return a.eps.unary != nil }
func (a *actorReplicaInstance[A]) hasStream() bool { return a.eps.stream != nil }

func (a *actorReplicaInstance[A]) serveHTTP(ctx context.Context, req Request) (Response, error) {
	if a.eps.http == nil {
		return Response{}, badRequest{fmt.Errorf("no HTTP endpoint")}
	}
	return a.eps.http(ctx, a.hosts[0], req)
}

func (a *actorReplicaInstance[A]) unary(ctx context.Context, body []byte) ([]byte, error) {
	return a.eps.unary(ctx, a.hosts[0], body)
}

func (a *actorReplicaInstance[A]) stream(ctx context.Context, body []byte, emit func([]byte) error) error {
	return a.eps.stream(ctx, a.hosts[0], body, emit)
}

func (a *actorReplicaInstance[A]) check(ctx context.Context) error {
	for i, h := range a.hosts {
		if err := h.Ready(ctx); err != nil {
			return fmt.Errorf("actor on host %d: %w", i, err)
		}
	}
	if a.eps.check != nil {
		return a.eps.check(ctx, a.hosts[0])
	}
	return nil
}

func (a *actorReplicaInstance[A]) close(ctx context.Context) {
	for _, h := range a.hosts {
		_ = h.Kill(ctx)
	}
}
