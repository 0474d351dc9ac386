package serve

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/goray-dev/goray/ray"
)

// Request is an HTTP request as an actor's [HTTP] method gets it: any
// method, the path below the deployment, the query, the headers (without
// hop-by-hop ones) and the whole body. It crosses to the replica as JSON,
// so it is the same on every backend.
type Request struct {
	// Method is the HTTP method ("GET", "POST", ...).
	Method string
	// Path is the path below /<deployment>, unescaped: "/" for
	// /<deployment> itself, "/v1/items/7" for /<deployment>/v1/items/7.
	Path string
	// Query is the parsed query string.
	Query url.Values
	// Header is the request's header, hop-by-hop headers removed.
	Header http.Header
	// Body is the request body, read whole (at most Options.MaxBodyBytes).
	Body []byte
}

// Response is what an actor's [HTTP] method answers: the status (0 means
// 200), headers and body.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// HTTP serves any request to /<deployment> and /<deployment>/<path> that
// the actor's other endpoints do not (POST /<deployment> with [Unary] or
// [Batched], POST /<deployment>/stream with [Streaming]): GET endpoints
// and REST paths served by actors. m is called on the replica's host-0
// actor with the [Request]; its [Response] is the answer. An error
// answers as a Unary method's does ([Error] chooses the status).
func HTTP[A any](m *ray.Method[A, Request, Response]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.http = func(ctx context.Context, h *ray.ActorHandle[A], req Request) (Response, error) {
			ref := m.Remote(ctx, h, req)
			out, err := ref.Get(ctx)
			if ctx.Err() != nil {
				_ = ref.Cancel(context.WithoutCancel(ctx))
			}
			return out, err
		}
	}}
}

// hasHTTP reports whether the deployment's replicas have an HTTP endpoint.
func (d *deployment) hasHTTP() bool {
	h, ok := d.spec.Replica.(interface{ hasHTTP() bool })
	return ok && h.hasHTTP()
}

// serveHTTPMethod answers r with the actor's HTTP endpoint, body read
// whole; rest is the path below the deployment.
func (d *deployment) serveHTTPMethod(ctx context.Context, w http.ResponseWriter, r *http.Request, rest string, body []byte, start time.Time) {
	header := r.Header.Clone()
	removeHopHeaders(header)
	req := Request{Method: r.Method, Path: rest, Query: r.URL.Query(), Header: header, Body: body}
	if req.Path == "" {
		req.Path = "/"
	}
	var resp Response
	code, msg := d.attempt(ctx, func(rep *replica) error {
		ai, ok := rep.inst.(actorInstance)
		if !ok {
			return badRequest{fmt.Errorf("deployment %q has no HTTP endpoint", d.spec.Name)}
		}
		var err error
		resp, err = ai.serveHTTP(ctx, req)
		return err
	})
	if code != 0 {
		d.fail(w, start, code, msg)
		return
	}
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(resp.Body)
	d.observe(status, start)
}

// endpointSet says which of Unary/Batched and Streaming an actor
// deployment has.
type endpointSet struct{ unary, stream bool }

func (d *deployment) endpoints() endpointSet {
	e, ok := d.spec.Replica.(interface{ endpointSet() endpointSet })
	if !ok {
		return endpointSet{}
	}
	return e.endpointSet()
}
