package serve

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goray-dev/goray/ray"
)

// retryAfter is the Retry-After, in seconds, of a 503.
const retryAfter = "1"

// modelIDKey is ModelIDHeader in canonical form: Header.Get would make it
// again, an allocation, for every request.
var modelIDKey = http.CanonicalHeaderKey(ModelIDHeader)

// headerValue is h.Get for a key in canonical form.
func headerValue(h http.Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// newline ends a JSON reply.
var newline = []byte{'\n'}

func (s *Server) httpRoutes() http.Handler {
	mux := s.routeMux(s.serveDeployment)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bothLengths(r) {
			refuseBothLengths(w, r)
			return
		}
		if name, rest, ok := deploymentPath(r); ok {
			s.serveDeployment(w, r, name, rest) // as the mux would, without its matching
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// routeMux is the ingress's routes, with deployment serving the
// deployments' ("/{name}" and "/{name}/{rest...}").
func (s *Server) routeMux(deployment func(w http.ResponseWriter, r *http.Request, name, rest string)) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /-/healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /-/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Status())
	})
	mux.HandleFunc("GET /-/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.metrics.write(w)
	})
	s.openAIRoutes(mux)
	mux.HandleFunc("/{name}", func(w http.ResponseWriter, r *http.Request) { deployment(w, r, r.PathValue("name"), "") })
	mux.HandleFunc("/{name}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		deployment(w, r, r.PathValue("name"), "/"+r.PathValue("rest"))
	})
	return mux
}

// deploymentPath returns the deployment's name and the rest of the path
// that routeMux's deployment routes would give for r, when r's path is a
// plain one that no other route can take: "/name" or "/name/rest" of
// letters, digits and "-_.~/" only (nothing the mux would unescape),
// already clean (no empty, "." or ".." segment the mux would redirect
// from), whose first segment is neither "-" (the server's own routes) nor
// "v1" (the OpenAI front's); not a CONNECT. The mux's matching costs a few
// allocations per request; other paths go to it.
func deploymentPath(r *http.Request) (name, rest string, ok bool) {
	p := r.URL.Path
	if r.Method == http.MethodConnect || r.URL.RawPath != "" || len(p) < 2 || p[0] != '/' {
		return "", "", false
	}
	prev := byte(0)
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '~':
		case c == '.':
			// "/." and "/.." segments
			if prev == '/' && (i+1 == len(p) || p[i+1] == '/' || (p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/'))) {
				return "", "", false
			}
		case c == '/':
			if prev == '/' {
				return "", "", false
			}
		default:
			return "", "", false
		}
		prev = c
	}
	name = p[1:]
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name, rest = name[:i], name[i:]
	}
	if name == "-" || name == "v1" {
		return "", "", false
	}
	return name, rest, true
}

// refuseBothLengths answers a request that had both Content-Length and
// Transfer-Encoding (see framedConn) with 400 and closes its connection.
// It reads a bounded part of the body first, briefly, so that the client
// is not reset before it reads the answer.
func refuseBothLengths(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, r.Body, 256<<10)
	_ = rc.SetReadDeadline(time.Now())
	w.Header().Set("Connection", "close")
	jsonError(w, http.StatusBadRequest, "request has both Content-Length and Transfer-Encoding (RFC 9112 §6.1, a request smuggling risk): send one of them")
}

// jsonError writes {"error": msg} with code.
func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": redactAddrs(msg)})
}

// internalAddr matches an IP address (with its port, and a URL's scheme
// before it), as errors from the cluster or a replica's server may carry.
var internalAddr = regexp.MustCompile(`(https?://)?(\b\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\])(:\d+)?`)

// redactAddrs replaces internal addresses in an answer's message: a client
// is not told where replicas run (the server's log has the whole error).
func redactAddrs(msg string) string {
	if !strings.ContainsAny(msg, ".:") {
		return msg
	}
	return internalAddr.ReplaceAllString(msg, "<internal address>")
}

func (s *Server) serveDeployment(w http.ResponseWriter, r *http.Request, name, rest string) {
	s.mu.RLock()
	if s.closing {
		s.mu.RUnlock()
		jsonError(w, http.StatusServiceUnavailable, "server is shutting down")
		return
	}
	d := s.deployments[name]
	if d == nil {
		s.mu.RUnlock()
		jsonError(w, http.StatusNotFound, fmt.Sprintf("no deployment %q; see GET /-/status", name))
		return
	}
	if d.deleting {
		s.mu.RUnlock()
		jsonError(w, http.StatusServiceUnavailable, fmt.Sprintf("deployment %q is being deleted; retry later", name))
		return
	}
	s.requests.Add(1)
	d.users.Add(1)
	s.mu.RUnlock()
	defer s.requests.Done()
	defer d.users.Done()
	if seg, ok := dotSegment(r); ok {
		d.fail(w, time.Now(), http.StatusBadRequest, fmt.Sprintf("path %q has the dot-segment %q (percent-encoded dots are dots, RFC 3986 §6.2.2): send the path without it", r.URL.EscapedPath(), seg))
		return
	}
	if id := headerValue(r.Header, modelIDKey); id != "" {
		model, e := d.routeModel(id)
		if e != nil {
			d.fail(w, time.Now(), e.Code, e.Message)
			return
		}
		r = r.WithContext(withModel(r.Context(), model))
	}

	start := time.Now()
	timeout := d.spec.RequestTimeout
	if _, isProcess := d.spec.Replica.(*processReplica); isProcess {
		if n := r.ContentLength; n > 0 && n <= min(smallBodyBytes, s.retryBuffer()) && r.Header.Get("Expect") == "" {
			// A small body, which the retry buffer would keep whole
			// anyway, is read first: it goes to the replica's server in
			// the same write as the request's head (a body the transport
			// cannot tell is in memory costs a write of its own).
			whole, ok := s.readBody(w, r, d, start)
			if !ok {
				return
			}
			defer s.releaseBody(int64(len(whole)))
			// (withDeadline: the proxy's own client keeps the deadline
			// on the replica's connection, with no timer of its own)
			ctx, cancel := withDeadline(r.Context(), timeout)
			defer cancel()
			d.proxy(ctx, w, r, nil, whole, start)
			return
		}
		// The body streams to the replica's server as it arrives.
		body, ok := s.openBody(w, r, d, start)
		if !ok {
			return
		}
		ctx, cancel := body.withTimeout(r.Context(), timeout)
		defer cancel()
		d.proxy(ctx, w, r, body, nil, start)
		return
	}
	// An actor's input is decoded into one Go value and crosses to the
	// replica as one message: its body is read whole first.
	body, ok := s.readBody(w, r, d, start)
	if !ok {
		return
	}
	// readBody holds len(body) of the budget. A unary request gives it
	// back as its response begins (no retry needs the body then), before
	// the client can send its next request; a stream keeps it to the end,
	// since a retried stream sends the body again.
	held := &heldBody{ResponseWriter: w, s: s, n: int64(len(body))}
	defer held.release()
	hasHTTP := d.hasHTTP()
	ep := d.endpoints()
	switch {
	case hasHTTP && !(rest == "" && r.Method == http.MethodPost && ep.unary) && !(rest == "/stream" && r.Method == http.MethodPost && ep.stream):
		ctx, cancel := withDeadline(r.Context(), timeout)
		defer cancel()
		d.serveHTTPMethod(ctx, held, r, rest, body, start)
	case rest == "" && r.Method == http.MethodPost:
		// (withDeadline: a call that runs at once on this goroutine
		// starts no timer)
		ctx, cancel := withDeadline(r.Context(), timeout)
		defer cancel()
		d.unary(ctx, held, body, start)
	case rest == "/stream" && r.Method == http.MethodPost:
		ctx, cancel := context.WithTimeout(r.Context(), 10*timeout)
		defer cancel()
		d.stream(ctx, w, body, start)
	case rest == "" || rest == "/stream":
		w.Header().Set("Allow", http.MethodPost)
		d.fail(w, start, http.StatusMethodNotAllowed, "use POST")
	default:
		d.fail(w, start, http.StatusNotFound, fmt.Sprintf("deployment %q serves POST /%s and POST /%s/stream", name, name, name))
	}
}

// readBody reads the request body into memory, in this order: admission
// (a deployment whose queue is full answers 503 before the body is read),
// the server's budget for bodies in memory (503 when this one does not
// fit), then the read itself, bounded by MaxBodyBytes (413) and
// BodyTimeout (408). It answers the request itself when it returns false;
// otherwise the body holds len(body) bytes of the budget, for the caller
// to release.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, d *deployment, start time.Time) ([]byte, bool) {
	if !s.admitBody(w, r, d, start) {
		return nil, false
	}
	limit := s.opts.MaxBodyBytes
	want := limit
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	if !s.acquireBody(want) {
		s.bodiesFull(w, d, start)
		return nil, false
	}
	data, code, msg := s.readWithin(w, r, want)
	if code != 0 {
		d.fail(w, start, code, msg)
		return nil, false
	}
	return data, true
}

// readWithin reads r's body, for which want bytes of the budget for
// bodies in memory are held, bounded by MaxBodyBytes and BodyTimeout. It
// returns the body, holding len(body) bytes of the budget (the rest of
// want is given back), or, when the read failed, the status to answer
// (413, 408 or 400) and a message, with want given back and the
// connection to be closed after the answer.
func (s *Server) readWithin(w http.ResponseWriter, r *http.Request, want int64) (data []byte, code int, msg string) {
	limit := s.opts.MaxBodyBytes
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout)) // not every ResponseWriter supports it
	var err error
	if n := r.ContentLength; n >= 0 && n <= limit {
		// Its length is known (and within the limit: see admitBody), and
		// net/http's body ends there: read into a buffer of that size.
		data = make([]byte, n)
		_, err = io.ReadFull(r.Body, data)
	} else {
		data, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	}
	if err != nil {
		// The deadline stays (passed, for a timeout) and the connection
		// closes after the answer: net/http would otherwise read the rest
		// of a small body before it writes the answer, with no deadline,
		// for as long as the client cares to take.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		s.releaseBody(want)
		code, msg = http.StatusBadRequest, fmt.Sprintf("read request body (at most %d bytes): %v", limit, err)
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			code = http.StatusRequestEntityTooLarge
		} else if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			code, msg = http.StatusRequestTimeout, fmt.Sprintf("the request body took longer than %v to arrive (Options.BodyTimeout)", s.opts.BodyTimeout)
		}
		return nil, code, msg
	}
	_ = rc.SetReadDeadline(time.Time{})
	if extra := want - int64(len(data)); extra > 0 {
		s.releaseBody(extra) // held only what arrived
	}
	return data, 0, ""
}

// admitBody checks what comes before any byte of a body is read or
// budgeted: admission (a deployment whose queue is full answers 503) and a
// Content-Length above MaxBodyBytes (413). It answers the request itself
// when it returns false.
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request, d *deployment, start time.Time) bool {
	if d.overloaded() {
		d.fail(w, start, http.StatusServiceUnavailable, fmt.Sprintf("deployment %q: %v; retry later", d.spec.Name, ErrOverloaded))
		return false
	}
	if limit := s.opts.MaxBodyBytes; r.ContentLength > limit {
		d.fail(w, start, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is larger than the limit of %d (Options.MaxBodyBytes)", r.ContentLength, limit))
		return false
	}
	return true
}

// openBody admits a request to a Process replica and returns the stream
// of its body, nil for a request without one, in the order readBody
// checks: admission (503), a Content-Length above MaxBodyBytes (413), then
// the budget for the body's retry buffer (503). It answers the request
// itself when it returns false. Nothing of the body is read yet: the
// first read, once a replica's server is connected, sends 100 Continue to
// a client that asked for it.
func (s *Server) openBody(w http.ResponseWriter, r *http.Request, d *deployment, start time.Time) (*bodyStream, bool) {
	if !s.admitBody(w, r, d, start) {
		return nil, false
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	want := s.retryBuffer()
	if r.ContentLength > 0 {
		want = min(want, r.ContentLength)
	}
	if !s.acquireBody(want) {
		s.bodiesFull(w, d, start)
		return nil, false
	}
	// The replica's server may answer before it has read the whole body
	// (an early error, a full-duplex endpoint): the body keeps streaming
	// while the response is written, instead of net/http discarding it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	return s.newBodyStream(w, r, want), true
}

// bodiesFull answers 503: the budget for bodies in memory is spent.
func (s *Server) bodiesFull(w http.ResponseWriter, d *deployment, start time.Time) {
	d.fail(w, start, http.StatusServiceUnavailable, fmt.Sprintf("the server holds as many request bodies as it may (Options.MaxBufferedBodyBytes, %d bytes); retry later", s.opts.MaxBufferedBodyBytes))
}

func (d *deployment) fail(w http.ResponseWriter, start time.Time, code int, msg string) {
	jsonError(w, code, msg)
	d.observe(code, start)
}

// lostReplica reports an error that means the replica (not the request)
// failed: its actor or host died, its slice went away, or its server
// stopped answering.
func lostReplica(err error) bool {
	switch ray.CodeOf(err) {
	case ray.ActorDied, ray.Unavailable:
		return true
	}
	return errors.Is(err, ray.ErrPlacementGroupRemoved) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// lostCause returns the error that shows a request's replica lost (see
// lostReplica), or nil when the request failed for another reason: its
// own (a bad body, nothing to send again) or its context's, unless the
// replica's server cut the response off.
func lostCause(ctx context.Context, err error) error {
	var bad badRequest
	var body clientBodyError
	var noReplay noReplayError
	if errors.As(err, &bad) || errors.As(err, &body) || errors.As(err, &noReplay) {
		return nil
	}
	if up, ok := errors.AsType[upstreamError](err); ok {
		if (ctx.Err() != nil && !up.cut) || !lostReplica(up.err) {
			return nil
		}
		return up.err
	}
	if ctx.Err() != nil || !lostReplica(err) {
		return nil
	}
	return err
}

// attempt runs do on replicas until it succeeds, fails for a reason other
// than a lost replica, or retries run out (non-idempotent requests are not
// retried). It returns the HTTP code and message of a failure, or 0.
func (d *deployment) attempt(ctx context.Context, do func(*replica) error) (int, string) {
	if e := d.try(ctx, do); e != nil {
		return e.Code, e.Message
	}
	return 0, ""
}

// try is attempt with the failure as a *CallError, whose kind handle
// callers match with errors.Is; nil on success.
func (d *deployment) try(ctx context.Context, do func(*replica) error) *CallError {
	fail := func(code int, kind, msg string) *CallError {
		return &CallError{Deployment: d.spec.Name, Code: code, Message: msg, kind: kind}
	}
	var tried []*replica
	model := ""
	if d.multiplexed() {
		model = modelOf(ctx)
	}
	for n := 0; ; n++ {
		rep, slot, err := d.acquireModel(ctx, tried, model)
		switch {
		case errors.Is(err, ErrOverloaded):
			return fail(http.StatusServiceUnavailable, kindOverloaded, fmt.Sprintf("deployment %q: %v; retry later", d.spec.Name, err))
		case errors.Is(err, ErrShuttingDown):
			return fail(http.StatusServiceUnavailable, kindShutdown, fmt.Sprintf("deployment %q: %v; retry later", d.spec.Name, err))
		case errors.Is(err, ErrNoReplica):
			return fail(http.StatusServiceUnavailable, kindNoReplica, fmt.Sprintf("deployment %q: %v; retry later", d.spec.Name, err))
		case err != nil:
			return fail(ctxCode(ctx), ctxKind(ctx), fmt.Sprintf("deployment %q: no replica became free: %v", d.spec.Name, cmp.Or(context.Cause(ctx), err)))
		}
		if slot != nil {
			err = ensureModel(ctx, rep, slot)
		}
		if err == nil {
			err = do(rep)
		}
		if slot != nil {
			releaseModel(slot)
		}
		if err != nil {
			// A replica the error shows lost leaves routing before its
			// slot is given back: the slot would go to a queued request,
			// which would meet the same dead replica.
			if cause := lostCause(ctx, err); cause != nil {
				rep.d.lost(rep, fmt.Sprintf("request failed: %v", cause), false)
			}
		}
		d.release(rep)
		if err == nil {
			return nil
		}
		// (declared after the success's return: errors.As makes them
		// escape, and each would be an allocation per request)
		var bad badRequest
		var up upstreamError
		var body clientBodyError
		var noReplay noReplayError
		switch {
		case errors.As(err, &bad):
			return fail(http.StatusBadRequest, kindBadCall, err.Error())
		case errors.As(err, &body):
			return fail(body.Code, kindBadCall, body.Msg)
		case errors.As(err, &noReplay):
			// A retry, or a redirect the client followed, found more of
			// the body sent than it can send again.
			return fail(http.StatusBadGateway, kindLost, fmt.Sprintf("deployment %q: the request could not be sent again: %s", d.spec.Name, noReplay.msg))
		case ctx.Err() != nil && !(errors.As(err, &up) && up.cut):
			return fail(ctxCode(ctx), ctxKind(ctx), fmt.Sprintf("deployment %q: %v", d.spec.Name, context.Cause(ctx)))
		case errors.As(err, &up):
			// The connection to the replica's server failed before the
			// response began: retried where the request may be.
			lost := lostReplica(up.err) // and taken out of routing above
			// A lost replica is replaced, so a retry waits for one; a
			// replica that is up but failed this request is retried
			// elsewhere only if another is ready.
			retry := d.spec.Idempotent && n < d.spec.MaxRetries && (lost || d.othersReady(append(tried, rep)))
			if retry && up.noReplay != "" {
				return fail(http.StatusBadGateway, kindLost, fmt.Sprintf("deployment %q: replica %s: %v, and %s", d.spec.Name, rep.id, up, up.noReplay))
			}
			if retry {
				tried = append(tried, rep)
				d.s.metrics.dep(d.spec.Name).retries.Inc()
				continue
			}
			return fail(http.StatusBadGateway, kindLost, fmt.Sprintf("deployment %q: replica %s: %v", d.spec.Name, rep.id, up))
		case lostReplica(err): // taken out of routing above
			if d.spec.Idempotent && n < d.spec.MaxRetries {
				tried = append(tried, rep)
				d.s.metrics.dep(d.spec.Name).retries.Inc()
				continue
			}
			return fail(http.StatusServiceUnavailable, kindLost, fmt.Sprintf("deployment %q: replica %s was lost: %v", d.spec.Name, rep.id, err))
		case ray.CodeOf(err) == ray.TaskFailed:
			// The method's own error: the status it chose (StatusError),
			// or 500.
			code, msg := methodError(err)
			if le, ok := errors.AsType[loadError](err); ok {
				msg = fmt.Sprintf("load model %q: %s", le.id, msg)
			}
			return fail(code, kindFailed, fmt.Sprintf("deployment %q: %s", d.spec.Name, msg))
		default:
			code := StatusOf(ray.CodeOf(err))
			if code == http.StatusTooManyRequests {
				code = http.StatusServiceUnavailable // the cluster's resources, not the client's rate
			}
			return fail(code, kindInternal, fmt.Sprintf("deployment %q: %v", d.spec.Name, err))
		}
	}
}

// ctxCode is 504 for a request that timed out, 499 for one the client
// abandoned. (A streamed request's timeout is a cancellation whose cause
// is context.DeadlineExceeded: see bodyStream.withTimeout.)
func ctxCode(ctx context.Context) int {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return http.StatusGatewayTimeout
	}
	return 499
}

// ctxKind is ctxCode's kind of CallError.
func ctxKind(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return kindTimeout
	}
	return kindCanceled
}

func (d *deployment) unary(ctx context.Context, w http.ResponseWriter, body []byte, start time.Time) {
	out, e := d.callUnary(ctx, body)
	if e != nil {
		d.fail(w, start, e.Code, e.Message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out) // not appended to: out may be the backend's own bytes
	_, _ = w.Write(newline)
	d.observe(http.StatusOK, start)
}

// decodeContext marks ctx for decodeBody when the deployment allows
// unknown fields.
func (d *deployment) decodeContext(ctx context.Context) context.Context {
	if d.spec.AllowUnknownFields {
		return context.WithValue(ctx, lenientKey{}, true)
	}
	return ctx
}

// callUnary routes one request of the deployment's request endpoint
// (Unary or Batched), a JSON body in and out, for POST /<name> and for
// handles alike.
func (d *deployment) callUnary(ctx context.Context, body []byte) ([]byte, *CallError) {
	ctx = d.decodeContext(ctx)
	var out []byte
	e := d.try(ctx, func(r *replica) error {
		ai, ok := r.inst.(actorInstance)
		if !ok || !ai.hasUnary() {
			return badRequest{fmt.Errorf("deployment %q has no unary endpoint; POST /%s/stream", d.spec.Name, d.spec.Name)}
		}
		var err error
		out, err = ai.unary(ctx, body)
		return err
	})
	return out, e
}

// stream answers with server-sent events: one "data: <chunk JSON>" event
// per chunk, then "event: done", or "event: error" with {"error": msg} when
// the stream fails after it began. A retry on another replica skips the
// chunks the client already has.
func (d *deployment) stream(ctx context.Context, w http.ResponseWriter, body []byte, start time.Time) {
	ctx = d.decodeContext(ctx)
	rc := http.NewResponseController(w)
	sent := 0
	code, msg := d.attempt(ctx, func(r *replica) error {
		ai, ok := r.inst.(actorInstance)
		if !ok || !ai.hasStream() {
			return badRequest{fmt.Errorf("deployment %q has no streaming endpoint; POST /%s", d.spec.Name, d.spec.Name)}
		}
		seen := 0
		return ai.stream(ctx, body, func(chunk []byte) error {
			seen++
			if seen <= sent {
				return nil // the client has it from an earlier attempt
			}
			if sent == 0 {
				h := w.Header()
				h.Set("Content-Type", "text/event-stream")
				h.Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
			}
			sent++
			if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
				return err
			}
			return rc.Flush()
		})
	})
	if sent == 0 {
		if code != 0 {
			d.fail(w, start, code, msg)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	}
	if code != 0 {
		data, _ := json.Marshal(map[string]string{"error": msg})
		_, _ = fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
	} else {
		_, _ = io.WriteString(w, "event: done\ndata: {}\n\n")
	}
	_ = rc.Flush()
	d.observe(cmp.Or(code, http.StatusOK), start)
}

// hopHeaders are not forwarded by a proxy (RFC 9110 7.6.1), nor are the
// headers a Connection header names (removeHopHeaders).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopHeaders deletes the hop-by-hop headers of h: those the
// Connection header names, then hopHeaders.
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// upstreamError is a failure to reach a Process replica's server or to
// get the start of its response (refused, reset, closed, timed out). Its
// message says which, without the server's internal address.
type upstreamError struct {
	err error
	// noReplay, when set, says why the request cannot be sent to
	// another replica: too much of its body was streamed.
	noReplay string
	// cut: the read of the client's body was cut off when the connection
	// broke, which ended the request's context; the request is not retried.
	cut bool
}

func (e upstreamError) Error() string {
	switch {
	case errors.Is(e.err, syscall.ECONNREFUSED):
		return "its server refused the connection"
	case errors.Is(e.err, syscall.ECONNRESET):
		return "its server reset the connection before responding"
	case errors.Is(e.err, syscall.EPIPE), errors.Is(e.err, net.ErrClosed):
		// A write of the body found the connection closed (net.ErrClosed:
		// by the transport, once its read saw the server's reset).
		return "the connection to its server broke while the request body was being sent"
	case errors.Is(e.err, io.EOF), errors.Is(e.err, io.ErrUnexpectedEOF):
		return "its server closed the connection before responding"
	}
	if ne, ok := errors.AsType[net.Error](e.err); ok && ne.Timeout() {
		return "its server did not respond in time"
	}
	return "its server could not be reached"
}

func (e upstreamError) Unwrap() error { return e.err }

// dotSegment reports whether the request's path has a segment that is
// "." or ".." once percent-decoded: net/http cleans literal dot-segments
// (with a redirect), but passes encoded ones on as they came, and a
// replica's server that decodes the path would resolve them. A segment
// holding an encoded slash counts by its parts ("%2e%2e%2fx" is "../x").
func dotSegment(r *http.Request) (string, bool) {
	p := r.URL.EscapedPath()
	if !strings.Contains(p, "%") {
		return "", false // literal dot-segments are net/http's
	}
	for seg := range strings.SplitSeq(p, "/") {
		if !strings.Contains(seg, "%") {
			continue
		}
		dec, err := url.PathUnescape(seg)
		if err != nil {
			continue // answered as a bad path later
		}
		for part := range strings.SplitSeq(strings.ReplaceAll(dec, "\\", "/"), "/") {
			if part == "." || part == ".." {
				return seg, true
			}
		}
	}
	return "", false
}

// escapedRest returns the part of the request's path after the deployment
// name, escaped exactly as the client sent it ("" for none).
func escapedRest(r *http.Request) string {
	p := r.URL.EscapedPath()
	if len(p) < 2 {
		return ""
	}
	if i := strings.IndexByte(p[1:], '/'); i >= 0 {
		return p[1+i:]
	}
	return ""
}

// smallBodyBytes bounds the request bodies to a Process replica that are
// read whole before the request is sent (when the retry buffer would keep
// them whole anyway, and the client does not wait for 100 Continue).
const smallBodyBytes = 16 << 10

// proxy forwards the request to a Process replica's server: the path
// after the deployment's name and the query byte for byte as the client
// sent them, the headers without hop-by-hop ones, the body streamed as it
// arrives (see bodyStream), or whole when it was read first. A request whose connection fails before the
// response begins (refused, reset, closed, timed out) is retried on
// another replica when the deployment is idempotent and the body sent so
// far fits in the retry buffer; a response is streamed, flushed at every
// read, so server-sent events pass through as they come; a response the
// server breaks off midway is aborted for the client too (as
// net/http/httputil.ReverseProxy does), never ended as if complete.
func (d *deployment) proxy(ctx context.Context, w http.ResponseWriter, in *http.Request, body *bodyStream, whole []byte, start time.Time) {
	orig := w // net/http's own, for bodyTooLarge
	if body != nil {
		stop := context.AfterFunc(ctx, body.interrupt)
		defer func() {
			stop()
			body.finish() // before the handler returns: nothing reads the request after it
		}()
		w = &releaseOnResponse{ResponseWriter: w, release: sync.OnceFunc(func() {
			body.responseBegan()
			// Full duplex leaves an unread body to us: net/http closes the
			// connection after the answer without saying so, and a
			// client would send its next request on a closed connection.
			if !body.complete() {
				orig.Header().Set("Connection", "close")
			}
		})}
	}
	status := 0
	cut := false
	raw := cmp.Or(escapedRest(in), "/")
	path, err := url.PathUnescape(raw)
	if err != nil {
		d.fail(w, start, http.StatusBadRequest, fmt.Sprintf("path %q: %v", raw, err))
		return
	}
	code, msg := d.attempt(ctx, func(r *replica) error {
		pi := r.inst.(*processInstance)
		var resp *http.Response
		var fr *forwardReq
		var err error
		if body == nil && d.s.conns != nil {
			// The proxy's own client, with no goroutine hand-offs: it
			// writes the request's head from the client's (net/http's
			// Request.Write would write the same) and, for a plain
			// response, adds its header to w's.
			u := url.URL{Path: path, RawPath: raw, RawQuery: in.URL.RawQuery}
			fr = &forwardReq{method: in.Method, uri: u.RequestURI(), header: in.Header, body: whole, dst: w.Header()}
			resp, err = d.s.conns.roundTrip(ctx, pi.addr, fr)
		} else {
			var unwatch func()
			resp, unwatch, err = d.transportTrip(ctx, in, pi, path, raw, body, whole)
			defer unwatch()
		}
		if err != nil {
			if e, ok := body.clientErr(ctx); ok {
				// The rest of the body is not read: the connection closes
				// after the answer.
				if e.Code == http.StatusRequestEntityTooLarge {
					bodyTooLarge(orig)
				} else {
					w.Header().Set("Connection", "close")
				}
				return e
			}
			if body.cutByConnLoss() {
				// The replica's connection broke while the client's body
				// was read (see connLost); that cancelled the request's
				// context, which is not the client going away.
				_, why := body.replayable()
				return upstreamError{err: err, noReplay: why, cut: true}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, ok := errors.AsType[noReplayError](err); ok {
				return err // a retry of the transport's own, or a redirect
			}
			up := upstreamError{err: err}
			if ok, why := body.replayable(); !ok {
				up.noReplay = why
			}
			return up
		}
		// The response has begun: from here on the request is not retried,
		// and the replica's slot is held until the body is copied.
		defer resp.Body.Close()
		status = resp.StatusCode
		if loc := resp.Header.Get("Location"); loc != "" {
			resp.Header.Set("Location", d.publicLocation(loc, pi.base))
		}
		cut = !copyResponse(w, resp, fr != nil && fr.inDst)
		return nil
	})
	if code != 0 {
		d.fail(w, start, code, msg)
		return
	}
	d.observe(status, start)
	if cut {
		panic(http.ErrAbortHandler) // the client sees a broken response, as the server sent it
	}
}

// transportTrip sends the request to the replica's server through the
// server's http.Transport (Options.Client's): a body streamed as it
// arrives, with the replica's connection watched for its loss (see
// connLost), or any request when Options.Client is set. unwatch ends the
// watch, when the attempt ends.
func (d *deployment) transportTrip(ctx context.Context, in *http.Request, pi *processInstance, path, raw string, body *bodyStream, whole []byte) (resp *http.Response, unwatch func(), err error) {
	var rb io.Reader = http.NoBody
	if whole != nil {
		rb = bytes.NewReader(whole) // with its length, and sent again as it is
	}
	rctx := ctx
	var stops []func()
	unwatch = func() {
		for _, stop := range stops {
			stop()
		}
	}
	if body != nil {
		a, err := body.attempt()
		if err != nil {
			return nil, unwatch, err
		}
		rb = a
		// Told when the replica's connection closes (see connLost).
		rctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			if wc, ok := info.Conn.(*watchedConn); ok {
				stops = append(stops, wc.watch(a.connLost))
			}
		}})
	}
	req, err := http.NewRequestWithContext(rctx, in.Method, pi.base, rb)
	if err != nil {
		return nil, unwatch, err
	}
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, raw, in.URL.RawQuery
	req.Header = in.Header.Clone()
	removeHopHeaders(req.Header)
	// The ingress answers Expect: 100-continue itself (net/http sends
	// 100 Continue at the first read of the body, once this request is
	// connected); the body follows at once.
	req.Header.Del("Expect")
	if body != nil {
		req.ContentLength, req.GetBody = in.ContentLength, body.getBody
		if in.ContentLength < 0 {
			req.TransferEncoding = []string{"chunked"}
		}
	}
	// The transport, not the client: a redirect is the client's to
	// follow (a reverse proxy that followed it would fetch whatever URL
	// a replica's server names, from inside the cluster).
	resp, err = d.s.transport().RoundTrip(req)
	return resp, unwatch, err
}

// bodyTooLarge tells net/http that w's request body was cut off at the
// limit, so that it answers as it does when an http.MaxBytesReader hits
// its limit: it closes the connection after the answer, and lingers so
// that a client still sending the body reads the answer. A MaxBytesReader
// is the only way to that; this one hits its limit at once. It runs on the
// handler's goroutine, which alone writes the response.
func bodyTooLarge(w http.ResponseWriter) {
	_, _ = http.MaxBytesReader(w, io.NopCloser(strings.NewReader("x")), 0).Read(make([]byte, 1))
}

// transport carries the proxy's requests to Process replicas: the
// Options.Client's transport.
func (s *Server) transport() http.RoundTripper {
	return cmp.Or[http.RoundTripper](s.client.Transport, http.DefaultTransport)
}

// publicLocation rewrites a redirect's Location that points into the
// replica's server (an absolute URL of its address, as servers that build
// URLs from the Host header write them, or a path from its root) to the
// same place below the deployment's route, as nginx's proxy_redirect
// does: a client can neither reach nor should see the replica's address.
// Other locations pass as they are.
func (d *deployment) publicLocation(loc, base string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	if u.IsAbs() || u.Host != "" {
		b, err := url.Parse(base)
		if err != nil || !strings.EqualFold(u.Host, b.Host) || (u.Scheme != "" && u.Scheme != b.Scheme) {
			return loc
		}
		u.Scheme, u.Host, u.User = "", "", nil
	} else if !strings.HasPrefix(u.Path, "/") {
		return loc // relative to the request's path: right as it is
	}
	esc := u.EscapedPath() // kept as the server escaped it (names need no escaping)
	u.Path, u.RawPath = "/"+d.spec.Name+u.Path, "/"+d.spec.Name+esc
	return u.String()
}

// copyBufs holds copyResponse's buffers.
var copyBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyResponse copies resp to w. A streamed response (server-sent events,
// or a body of unknown length) is flushed at every read, so that each
// event reaches the client as it comes; one of known length is buffered
// as net/http buffers any handler's answer (as httputil.ReverseProxy
// does). It reports whether the body ended normally; false when the
// server broke it off (or the client went away). headerDone says that
// resp's header is already w's (see parseHead).
func copyResponse(w http.ResponseWriter, resp *http.Response, headerDone bool) bool {
	if !headerDone {
		removeHopHeaders(resp.Header)
		h := w.Header()
		for k, vs := range resp.Header {
			h[k] = append(h[k], vs...)
		}
	}
	w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0
	if ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(ct), "text/event-stream") {
		flush = true
	}
	rc := http.NewResponseController(w)
	bp := copyBufs.Get().(*[32 << 10]byte)
	defer copyBufs.Put(bp)
	buf := bp[:]
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false
			}
			if flush {
				_ = rc.Flush()
			}
		}
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// releaseOnResponse calls release when the response begins (its header is
// written), then passes everything on; Unwrap lets
// http.ResponseController reach the connection's writer (Flush, write
// deadlines).
type releaseOnResponse struct {
	http.ResponseWriter
	release func()
}

func (w *releaseOnResponse) WriteHeader(code int) {
	w.release()
	w.ResponseWriter.WriteHeader(code)
}

func (w *releaseOnResponse) Write(b []byte) (int, error) {
	w.release()
	return w.ResponseWriter.Write(b)
}

func (w *releaseOnResponse) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// heldBody gives an in-memory request body's n bytes of the budget back
// to the server when the response begins (its header is written) or at
// the latest when release is called: releaseOnResponse for the handler's
// own goroutine, without a closure and a sync.Once per request.
type heldBody struct {
	http.ResponseWriter
	s        *Server
	n        int64
	released bool
}

func (w *heldBody) release() {
	if !w.released {
		w.released = true
		w.s.releaseBody(w.n)
	}
}

func (w *heldBody) WriteHeader(code int) {
	w.release()
	w.ResponseWriter.WriteHeader(code)
}

func (w *heldBody) Write(b []byte) (int, error) {
	w.release()
	return w.ResponseWriter.Write(b)
}

func (w *heldBody) Unwrap() http.ResponseWriter { return w.ResponseWriter }
