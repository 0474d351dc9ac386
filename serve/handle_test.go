package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// The tokenizer is a deployment in front of the echo model: it calls the
// model through a handle from its constructor input, or by name through a
// Router, from wherever its actor runs (in process, or a worker process).
type tokenizer struct {
	model  serve.DeploymentHandle[EchoIn, EchoOut]
	router serve.Router
}

type TokInit struct {
	Model  serve.DeploymentHandle[EchoIn, EchoOut]
	Router serve.Router
}

type TokIn struct {
	Text string
	// ByName, if set, gets a handle to this deployment through the Router
	// instead of using the Model handle; WrongTypes gets it with the wrong
	// types.
	ByName     string
	WrongTypes bool
	// Timeout bounds the nested call.
	Timeout time.Duration
	// Work, Gate and Fail are passed to the model.
	Work time.Duration
	Gate string
	Fail bool
}

type TokOut struct {
	Tokens []string
	Model  EchoOut
	PID    int // of the process the tokenizer ran in
	// The nested call's error and what it matches.
	Err                                       string
	NoDeployment, BadCall, Deadline, TaskFail bool
	Took                                      time.Duration
}

var (
	tokClass = ray.NewActorClass("servetest.tokenizer", func(ctx context.Context, in TokInit) (*tokenizer, error) {
		return &tokenizer{model: in.Model, router: in.Router}, nil
	})
	tokCall = ray.NewMethod(tokClass, "tokenize", func(ctx context.Context, t *tokenizer, in TokIn) (TokOut, error) {
		out := TokOut{Tokens: strings.Fields(in.Text), PID: os.Getpid()}
		if in.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, in.Timeout)
			defer cancel()
		}
		model := t.model
		var err error
		switch {
		case in.WrongTypes:
			var h serve.DeploymentHandle[string, int]
			if h, err = serve.Handle[string, int](t.router, in.ByName); err == nil {
				_, err = h.Call(ctx, "x")
			}
		case in.ByName != "":
			model, err = serve.Handle[EchoIn, EchoOut](t.router, in.ByName)
		}
		start := time.Now()
		if err == nil && !in.WrongTypes {
			out.Model, err = model.Call(ctx, EchoIn{Text: strings.Join(out.Tokens, "|"), Work: in.Work, Gate: in.Gate, Fail: in.Fail})
		}
		out.Took = time.Since(start)
		if err != nil {
			out.Err = err.Error()
			out.NoDeployment = errors.Is(err, serve.ErrNoDeployment)
			out.BadCall = errors.Is(err, serve.ErrBadCall)
			out.Deadline = errors.Is(err, context.DeadlineExceeded)
			out.TaskFail = errors.Is(err, ray.ErrTaskFailed)
		}
		return out, nil
	})
)

// composed deploys the echo model as "model" and the tokenizer in front of
// it as "tok", holding a handle to the model and a Router.
func composed(t *testing.T, srv *serve.Server, modelReplicas int) serve.DeploymentHandle[TokIn, TokOut] {
	t.Helper()
	is := is.New(t)
	m := deployment("model")
	m.MinReplicas = modelReplicas
	is.NoErr(srv.Deploy(t.Context(), m))
	model, err := serve.Handle[EchoIn, EchoOut](srv, "model")
	is.NoErr(err)
	is.NoErr(srv.Deploy(t.Context(), serve.Deployment{
		Name:        "tok",
		Replica:     serve.Actor(tokClass, TokInit{Model: model, Router: srv.Router()}, serve.Unary(tokCall)),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MaxConcurrentRequests: 8,
	}))
	tok, err := serve.Handle[TokIn, TokOut](srv, "tok")
	is.NoErr(err)
	return tok
}

// TestHandleCall: a typed call from the driver reaches the endpoint, counts
// in the deployment's metrics, and a failing callee is a CallError that
// matches ray.ErrTaskFailed; a Batched endpoint batches handle calls.
func TestHandleCall(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	_, _ = startServer(t, srv)
	is.NoErr(srv.Deploy(t.Context(), deployment("model")))
	h, err := serve.Handle[EchoIn, EchoOut](srv, "model")
	is.NoErr(err)
	is.Equal(h.Deployment(), "model")
	out, err := h.Call(t.Context(), EchoIn{Text: "hi"})
	is.NoErr(err)
	is.Equal(out.Text, "model:hi")
	is.Equal(out.WorkerID, "0") // host 0 serves

	_, err = h.Call(t.Context(), EchoIn{Fail: true})
	var ce *serve.CallError
	is.True(errors.As(err, &ce))
	is.Equal(ce.Code, http.StatusInternalServerError)
	is.Equal(ce.Deployment, "model")
	is.True(errors.Is(err, ray.ErrTaskFailed))
	is.True(strings.Contains(err.Error(), "the model refused"))
	t.Log(err)

	metrics := metricsText(srv)
	is.True(strings.Contains(metrics, `goray_serve_requests_total{code="200",deployment="model"} 1`))
	is.True(strings.Contains(metrics, `goray_serve_requests_total{code="500",deployment="model"} 1`))

	// A Batched endpoint gathers concurrent handle calls into one batch.
	is.NoErr(srv.Deploy(t.Context(), batchedDeployment("mb", serve.BatchOptions{MaxSize: 4, MaxWait: time.Second}, 8)))
	hb, err := serve.Handle[EchoIn, EchoOut](srv, "mb")
	is.NoErr(err)
	takeBatchSizes()
	var wg sync.WaitGroup
	outs := make([]string, 4)
	for i := range outs {
		wg.Go(func() {
			o, err := hb.Call(t.Context(), EchoIn{Text: fmt.Sprint(i)})
			if err != nil {
				t.Error(err)
			}
			outs[i] = o.Text
		})
	}
	wg.Wait()
	is.Equal(outs, []string{"mb:0", "mb:1", "mb:2", "mb:3"}) // each caller its own output
	is.Equal(takeBatchSizes(), []int{4})                     // in one call, sent when full
}

func metricsText(srv *serve.Server) string {
	var b strings.Builder
	srv.WriteMetrics(&b)
	return b.String()
}

// TestHandleErrors: an unknown deployment, wrong types, a deployment
// without a request endpoint and the zero handle fail with errors naming
// what was wrong and what is valid.
func TestHandleErrors(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	_, _ = startServer(t, srv)
	is.NoErr(srv.Deploy(t.Context(), deployment("model")))
	is.NoErr(srv.Deploy(t.Context(), serve.Deployment{
		Name: "words", Replica: serve.Actor(echoClass, "w:", serve.Streaming(echoStream)),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
	}))

	_, err := serve.Handle[EchoIn, EchoOut](srv, "nope")
	t.Log(err)
	is.True(errors.Is(err, serve.ErrNoDeployment))
	is.True(strings.Contains(err.Error(), `no deployment "nope" on this server (it has "model", "words")`))

	_, err = serve.Handle[string, EchoOut](srv, "model")
	t.Log(err)
	is.True(errors.Is(err, serve.ErrBadCall))
	is.True(strings.Contains(err.Error(), "serve.Handle[string, serve_test.EchoOut] does not fit its endpoint serve.Unary(servetest.echo.call), which takes serve_test.EchoIn and returns serve_test.EchoOut"))
	var ce *serve.CallError
	is.True(errors.As(err, &ce))
	is.Equal(ce.Code, http.StatusBadRequest)

	_, err = serve.Handle[EchoIn, string](srv, "model")
	is.True(errors.Is(err, serve.ErrBadCall))

	_, err = serve.Handle[EchoIn, EchoOut](srv, "words")
	t.Log(err)
	is.True(errors.Is(err, serve.ErrBadCall))
	is.True(strings.Contains(err.Error(), "no request endpoint for handles (serve.Unary or serve.Batched), only serve.Streaming"))

	var zero serve.DeploymentHandle[EchoIn, EchoOut]
	_, err = zero.Call(t.Context(), EchoIn{})
	is.True(err != nil)
	is.True(strings.Contains(err.Error(), "zero DeploymentHandle"))
	_, err = serve.Handle[EchoIn, EchoOut](nil, "model")
	is.True(err != nil)
	_, err = serve.Handle[EchoIn, EchoOut](serve.Router{}, "model")
	is.True(err != nil)
}

// TestHandleRoutesAcrossReplicas: concurrent handle calls spread over the
// replicas by the router, each up to MaxConcurrentRequests.
func TestHandleRoutesAcrossReplicas(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	_, _ = startServer(t, srv)
	d := deployment("spread")
	d.MinReplicas, d.MaxConcurrentRequests = 2, 2
	is.NoErr(srv.Deploy(t.Context(), d))
	h, err := serve.Handle[EchoIn, EchoOut](srv, "spread")
	is.NoErr(err)
	g := newGate("spread")
	var wg sync.WaitGroup
	hosts := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			out, err := h.Call(t.Context(), EchoIn{Text: "x", Gate: g})
			if err != nil {
				t.Error(err)
			}
			hosts <- out.Host
		})
	}
	gates.arrivals(t, g, 4)
	// Both replicas are at their limit of 2: none is queued.
	st := dep(srv.Status(), "spread")
	is.Equal(st.Queued, 0)
	for _, r := range st.Replicas {
		is.Equal(r.Ongoing, 2)
	}
	gates.release(g)
	wg.Wait()
	close(hosts)
	seen := map[string]int{}
	for h := range hosts {
		seen[h]++
	}
	is.Equal(len(seen), 2) // two replicas' host 0
	for _, n := range seen {
		is.Equal(n, 2)
	}
}

// TestHandleBackpressureAndCancel: with the replica at its limit and the
// queue full a call fails at once with ErrOverloaded (503); a call whose
// context ends leaves the queue, or frees its replica's slot, at once; the
// callee's RequestTimeout fails a call with DeadlineExceeded (504).
func TestHandleBackpressureAndCancel(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	_, _ = startServer(t, srv)
	d := deployment("bp")
	d.MaxConcurrentRequests, d.MaxQueuedRequests = 1, 1
	d.RequestTimeout = 2 * time.Second
	is.NoErr(srv.Deploy(t.Context(), d))
	h, err := serve.Handle[EchoIn, EchoOut](srv, "bp")
	is.NoErr(err)

	g, err := fillAndCancel(t, srv, h, "bp")
	is.True(strings.Contains(err.Error(), `deployment "bp": every replica is at its limit and the queue is full`))
	select {
	case err := <-gates.get(g).ended: // the model's method was cancelled too
		is.True(errors.Is(err, context.Canceled))
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call still runs in the replica")
	}

	// The caller's deadline bounds the call.
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = h.Call(short, EchoIn{Gate: g})
	is.Equal(err, context.DeadlineExceeded)

	// The callee's RequestTimeout bounds it too: 504.
	_, err = h.Call(t.Context(), EchoIn{Gate: g})
	t.Log(err)
	is.True(errors.Is(err, context.DeadlineExceeded))
	var ce *serve.CallError
	is.True(errors.As(err, &ce))
	is.Equal(ce.Code, http.StatusGatewayTimeout)
	gates.release(g)
	out, err := h.Call(t.Context(), EchoIn{Text: "after"})
	is.NoErr(err)
	is.Equal(out.Text, "bp:after")
}

// fillAndCancel holds the one slot (a call waiting at a new gate, which
// it returns) and the one queue place of deployment name, whose
// MaxConcurrentRequests and MaxQueuedRequests are 1, through h; checks
// that another call is refused at once with ErrOverloaded (503), which it
// returns; then cancels the queued call and the running one, each failing
// with its caller's own context error and giving its place back at once.
func fillAndCancel(t *testing.T, srv *serve.Server, h serve.DeploymentHandle[EchoIn, EchoOut], name string) (gate string, refused error) {
	t.Helper()
	is := is.New(t)
	g := newGate(name)
	runCtx, cancelRun := context.WithCancel(t.Context())
	running := make(chan error, 1)
	go func() {
		_, err := h.Call(runCtx, EchoIn{Gate: g})
		running <- err
	}()
	gates.arrivals(t, g, 1)
	queueCtx, cancelQueued := context.WithCancel(t.Context())
	queued := make(chan error, 1)
	go func() {
		_, err := h.Call(queueCtx, EchoIn{Text: "q"})
		queued <- err
	}()
	waitStatus(t, srv, "one queued", func(st serve.Status) bool { return dep(st, name).Queued == 1 })

	start := time.Now()
	_, err := h.Call(t.Context(), EchoIn{Text: "over"})
	t.Log(err)
	is.True(errors.Is(err, serve.ErrOverloaded))
	var ce *serve.CallError
	is.True(errors.As(err, &ce))
	is.Equal(ce.Code, http.StatusServiceUnavailable)
	is.True(time.Since(start) < 10*time.Second) // refused at once, not after waiting for the slot, freed only below

	cancelQueued()
	is.Equal(<-queued, context.Canceled) // the caller's own context error, as it is
	waitStatus(t, srv, "the queue empty", func(st serve.Status) bool { return dep(st, name).Queued == 0 })
	cancelRun()
	is.Equal(<-running, context.Canceled)
	waitStatus(t, srv, "the slot freed", func(st serve.Status) bool { return dep(st, name).Replicas[0].Ongoing == 0 })
	return g, err
}

// TestHandleRetriesLostReplica: a call whose replica dies is retried on
// another replica when the callee is Idempotent, and fails with
// ErrReplicaLost (503) when it is not.
func TestHandleRetriesLostReplica(t *testing.T) {
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			is := is.New(t)
			c, b := newCluster(t, 3)
			srv := serve.New(c, nil)
			_, _ = startServer(t, srv)
			name := fmt.Sprintf("hloss-%v", idempotent)
			d := deployment(name)
			d.MinReplicas, d.Idempotent = 2, idempotent
			d.Health = &serve.HealthCheck{Period: time.Hour}
			is.NoErr(srv.Deploy(t.Context(), d))
			h, err := serve.Handle[EchoIn, EchoOut](srv, name)
			is.NoErr(err)

			g := newGate(name)
			type result struct {
				out EchoOut
				err error
			}
			res := make(chan result, 1)
			go func() {
				out, err := h.Call(t.Context(), EchoIn{Text: "x", Gate: g})
				res <- result{out, err}
			}()
			gates.arrivals(t, g, 1)
			var victim serve.ReplicaStatus
			waitStatus(t, srv, "the call on a replica", func(st serve.Status) bool {
				var ok bool
				victim, ok = replicaWith(dep(st, name), func(r serve.ReplicaStatus) bool { return r.Ongoing == 1 })
				return ok
			})
			is.NoErr(b.KillNode(context.Background(), victim.Hosts[0]))
			if idempotent {
				gates.arrivals(t, g, 1) // retried on the other replica
			}
			gates.release(g)
			r := <-res
			retries := strings.Contains(metricsText(srv), fmt.Sprintf(`goray_serve_retries_total{deployment=%q} 1`, name))
			if idempotent {
				is.NoErr(r.err)
				is.Equal(r.out.Text, name+":x")
				is.True(r.out.Host != victim.Hosts[0])
				is.True(retries)
				return
			}
			t.Log(r.err)
			is.True(errors.Is(r.err, serve.ErrReplicaLost))
			var ce *serve.CallError
			is.True(errors.As(r.err, &ce))
			is.Equal(ce.Code, http.StatusServiceUnavailable)
			is.True(strings.Contains(r.err.Error(), "was lost"))
			is.True(!retries)
		})
	}
}

// TestHandleNestedInProcess: a replica calls another deployment through
// the handle in its constructor input, and by name through a Router, on
// the in-process simulator (the call reaches the router directly).
func TestHandleNestedInProcess(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 3)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	tok := composed(t, srv, 1)

	out, err := tok.Call(t.Context(), TokIn{Text: "a b c"})
	is.NoErr(err)
	is.Equal(out.Err, "")
	is.Equal(out.Tokens, []string{"a", "b", "c"})
	is.Equal(out.Model.Text, "model:a|b|c")
	is.Equal(out.PID, os.Getpid())

	out, err = tok.Call(t.Context(), TokIn{Text: "d", ByName: "model"})
	is.NoErr(err)
	is.Equal(out.Model.Text, "model:d")

	out, err = tok.Call(t.Context(), TokIn{Text: "d", ByName: "nope"})
	is.NoErr(err)
	is.True(out.NoDeployment)
	is.True(strings.Contains(out.Err, `no deployment "nope" on this server (it has "model", "tok")`))

	// Through HTTP too: POST /tok calls the model inside.
	code, _, body := post(t, client, base+"/tok", TokIn{Text: "e f"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(body), `"Text":"model:e|f"`))
}

// TestHandleShutdownWaitsForNestedCalls: a request in flight at Shutdown
// still makes its nested call (Shutdown admits handle calls until the
// requests and calls in flight are done), then Shutdown completes.
func TestHandleShutdownWaitsForNestedCalls(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 3)
	srv := serve.New(c, nil)
	tok := composed(t, srv, 1)
	g := newGate("shutdown")
	res := make(chan error, 1)
	go func() {
		out, err := tok.Call(context.Background(), TokIn{Text: "late", Gate: g})
		if err == nil && out.Err != "" {
			err = errors.New(out.Err)
		}
		res <- err
	}()
	gates.arrivals(t, g, 1)
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	waitStatus(t, srv, "shutting down", func(st serve.Status) bool { return st.ShuttingDown })
	gates.release(g)
	is.NoErr(<-res)
	is.NoErr(<-shut)
	_, err := tok.Call(context.Background(), TokIn{Text: "after"})
	is.True(errors.Is(err, serve.ErrShuttingDown))
}

// TestHandleNestedWorkerProcesses: the tokenizer runs in a worker process
// and calls the model back through the driver's router over the network:
// typed calls, by name, an unknown deployment and wrong types (clear errors
// across the process boundary), and a caller's deadline that frees the
// model's slot at once.
func TestHandleNestedWorkerProcesses(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 1, Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", Count: 3, ChipsPerHost: 4}},
	}, &local.Options{Processes: &local.ProcessOptions{}})
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), b, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	srv := serve.New(c, nil)
	_, _ = startServer(t, srv)
	tok := composed(t, srv, 2)

	hosts := map[string]bool{}
	for i := range 8 {
		out, err := tok.Call(t.Context(), TokIn{Text: fmt.Sprintf("w %d", i)})
		is.NoErr(err)
		is.Equal(out.Err, "")
		is.Equal(out.Model.Text, fmt.Sprintf("model:w|%d", i))
		is.True(out.PID != os.Getpid()) // the tokenizer ran in a worker process
		hosts[out.Model.Host] = true
	}
	t.Log("model hosts:", hosts)

	out, err := tok.Call(t.Context(), TokIn{Text: "n", ByName: "model"})
	is.NoErr(err)
	is.Equal(out.Model.Text, "model:n")

	out, err = tok.Call(t.Context(), TokIn{Text: "n", ByName: "nope"})
	is.NoErr(err)
	t.Log(out.Err)
	is.True(out.NoDeployment)
	is.True(strings.Contains(out.Err, `no deployment "nope" on this server (it has "model", "tok")`))

	out, err = tok.Call(t.Context(), TokIn{ByName: "model", WrongTypes: true})
	is.NoErr(err)
	t.Log(out.Err)
	is.True(out.BadCall)
	is.True(strings.Contains(out.Err, "serve.Handle[string, int] does not fit its endpoint serve.Unary(servetest.echo.call), which takes serve_test.EchoIn and returns serve_test.EchoOut"))

	out, err = tok.Call(t.Context(), TokIn{Text: "f", Fail: true})
	is.NoErr(err)
	t.Log(out.Err)
	is.True(out.TaskFail) // the model's error, across the process boundary
	is.True(strings.Contains(out.Err, "the model refused"))

	// The tokenizer's deadline reaches the driver's router: the nested call
	// ends after 300ms though the model works for 10s, and its slot is freed.
	start := time.Now()
	out, err = tok.Call(t.Context(), TokIn{Text: "slow", Work: 10 * time.Second, Timeout: 300 * time.Millisecond})
	is.NoErr(err)
	t.Log(out.Err, out.Took)
	is.True(out.Deadline)
	is.True(out.Took < 5*time.Second) // the 300 ms deadline, not the model's 10 s
	waitStatus(t, srv, "the model's slots free", func(st serve.Status) bool {
		for _, r := range dep(st, "model").Replicas {
			if r.Ongoing != 0 {
				return false
			}
		}
		return true
	})
	is.True(time.Since(start) < 8*time.Second) // freed by the deadline, not when the model is done after 10 s
}

// elsewhere returns h as a process other than its server's sees it: the
// JSON it crosses as, with the server's ID changed so that the calls go
// over the network to the server's call listener, as from a worker
// process, while the test can still gate the model's calls.
func elsewhere[I, O any](t testing.TB, h serve.DeploymentHandle[I, O], token string) serve.DeploymentHandle[I, O] {
	t.Helper()
	is := is.New(t)
	b, err := json.Marshal(h)
	is.NoErr(err)
	var m struct {
		Router     map[string]string `json:"router"`
		Deployment string            `json:"deployment"`
	}
	is.NoErr(json.Unmarshal(b, &m))
	m.Router["server"] = "another process"
	if token != "" {
		m.Router["token"] = token
	}
	b, err = json.Marshal(m)
	is.NoErr(err)
	var r serve.DeploymentHandle[I, O]
	is.NoErr(json.Unmarshal(b, &r))
	return r
}

// TestHandleOverTheNetwork: a handle in another process reaches the
// router over HTTP with the same semantics: typed calls, a full queue
// fails with ErrOverloaded, a caller whose context ends leaves the queue
// or frees its slot at once (the aborted HTTP request cancels the call in
// the router), a wrong token is refused, and a server that shut down is
// unreachable, naming its address.
func TestHandleOverTheNetwork(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	d := deployment("net")
	d.MaxConcurrentRequests, d.MaxQueuedRequests = 1, 1
	is.NoErr(srv.Deploy(t.Context(), d))
	local, err := serve.Handle[EchoIn, EchoOut](srv, "net")
	is.NoErr(err)
	h := elsewhere(t, local, "")

	out, err := h.Call(t.Context(), EchoIn{Text: "far"})
	is.NoErr(err)
	is.Equal(out.Text, "net:far")

	g, _ := fillAndCancel(t, srv, h, "net")
	gates.release(g)
	var ce *serve.CallError

	_, err = elsewhere(t, local, "forged").Call(t.Context(), EchoIn{})
	t.Log(err)
	is.True(errors.As(err, &ce))
	is.Equal(ce.Code, http.StatusUnauthorized)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	is.NoErr(srv.Shutdown(ctx))
	_, err = h.Call(t.Context(), EchoIn{})
	t.Log(err)
	is.True(errors.Is(err, serve.ErrRouterUnreachable))
	is.True(strings.Contains(err.Error(), "the driver's router at 127.0.0.1:"))
	_, err = local.Call(t.Context(), EchoIn{})
	is.True(errors.Is(err, serve.ErrShuttingDown))
}
