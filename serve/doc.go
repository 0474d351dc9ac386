// Package serve serves models over HTTP from deployments whose replicas
// each own a whole TPU slice, with routing, autoscaling by slices, health
// checks, metrics and graceful shutdown.
//
// A Deployment names what a replica runs and the slice it needs:
//
//	srv := serve.New(cluster, nil)
//	err := srv.Deploy(ctx, serve.Deployment{
//		Name:        "llm",
//		Replica:     serve.Actor(LLM, cfg, serve.Unary(Generate), serve.Streaming(GenerateStream)),
//		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
//		MinReplicas: 1, MaxReplicas: 4, MaxConcurrentRequests: 8,
//		Idempotent:  true,
//		Autoscaling: &serve.Autoscaling{TargetOngoingRequests: 4},
//	})
//	go srv.Serve(listener)
//	defer srv.Shutdown(ctx)
//
// # Replicas
//
// Each replica reserves one whole slice with ray.NewSlicePlacementGroup
// (every host or none, never shared) and runs one worker per host, pinned
// to the host's bundle so that it gets the host's TPU env (TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES, TPU_NAME, ...). Host 0 serves requests. A replica
// is either
//
//   - an actor class ([Actor]): one actor per host; requests are typed
//     calls of a ray.Method ([Unary]), batches of them ([Batched], Ray
//     Serve's @serve.batch) or a [Stream] ([Streaming]) on the host-0
//     actor, JSON in and out; or
//   - an external HTTP server process ([Process]), such as vLLM, started on
//     host 0 (and optionally a worker command on the other hosts), that the
//     router proxies to.
//
// # Ingress
//
// The Server's handler routes POST /<name> (JSON in, JSON out) and POST
// /<name>/stream (server-sent events: "data: <chunk JSON>" per chunk, then
// "event: done", or "event: error") to actor deployments, and
// /<name>/<path> to process deployments; GET /-/status returns [Status] as
// JSON, GET /-/metrics the Prometheus metrics (see [Server.WriteMetrics]), GET
// /-/healthz "ok". Each request has the deployment's RequestTimeout (504
// when it passes).
//
// An actor deployment's request body is read whole before the call and
// checked against the endpoint's input type; its bytes cross to the
// replica as one message, and the method's encoded output is the answer
// (ray's Method.CallJSON), so the router does not decode and encode the
// JSON again. A call to an actor in the server's process runs on the
// request's goroutine when the actor has a free slot. A process
// deployment's body streams to its server as it arrives (a body of at most
// 16 KiB is read first and sent with the request's head), and the ingress
// keeps at most Options.RetryBufferBytes of it (1 MiB), the prefix a retry
// on another replica sends again; a request that failed after more than
// that was sent is answered 502, not retried. A process replica's
// redirect goes to the client, not followed by the router.
//
// # Streaming
//
// An actor call returns one value, so a stream is a long-poll protocol of
// three actor methods that [NewStream] registers: start runs the user's
// function for the whole stream, buffering its chunks in the actor's
// process under a router-chosen ID; next returns every buffered chunk at
// once (waiting for at least one); cancel stops it when the client goes
// away. Batching keeps the round trips per stream low when tokens come
// fast, the bounded buffer gives backpressure when the client is slow, and
// the protocol needs nothing of the backend beyond actor calls, so it works
// in worker processes and on Kubernetes alike.
//
// # Composition
//
// A deployment calls another through a typed [DeploymentHandle], Ray
// Serve's DeploymentHandle: [Handle] returns one for a deployment's request
// endpoint ([Unary] or [Batched]), checking its name and types, and
// [DeploymentHandle.Call] goes through the callee's router as POST /<name>
// does (replica choice, limits, queue, timeout, retries, batching,
// metrics). A handle crosses to replicas as JSON, in an actor's
// constructor input:
//
//	model, err := serve.Handle[ModelIn, ModelOut](srv, "model")
//	srv.Deploy(ctx, serve.Deployment{Name: "tokenizer",
//		Replica: serve.Actor(Tokenizer, TokenizerConfig{Model: model}, serve.Unary(Complete)), ...})
//	// in Complete, wherever the actor runs:
//	out, err := t.model.Call(ctx, ModelIn{IDs: ids})
//
// In the server's process a handle calls the router directly; in a worker
// process or a pod it calls back to the driver's router over HTTP, on a
// listener the Server opens at ray.DriverHost when a handle first crosses,
// authenticated by a per-server token. A [Router] ([Server.Router]) crosses
// the same way and gets handles by name inside a replica. Failures are
// [*CallError]s matching [ErrOverloaded], [ErrReplicaLost],
// [ErrNoDeployment], [ErrBadCall] and the others with errors.Is.
//
// # Model multiplexing
//
// A deployment's replicas can share a pool of models loaded on demand by
// ID, as Ray Serve's @serve.multiplexed: [NewModels] declares how an actor
// loads (and unloads) one model, [Multiplexed] serves it, and
// Deployment.Multiplex bounds the models per replica (least recently used
// evicted). A request names its model with the ModelIDHeader header
// (serve_multiplexed_model_id) or [DeploymentHandle.WithModelID]; the
// router sends it to a replica that has the model, else has one replica
// load it while the requests for it wait for that one load. Process
// replicas are routed by model the same way and load models themselves.
//
// # OpenAI-compatible front
//
// GET /v1/models lists the model IDs of every Deployment.Models, and POST
// /v1/chat/completions and /v1/completions go to the deployment serving
// the body's "model": as they came to a Process replica's server, or to
// an actor's [OpenAI] endpoint, whose generated chunks the front turns
// into OpenAI's objects ("stream": true: chat.completion.chunk events
// ending with data: [DONE]). A model no deployment serves is a 404 in
// OpenAI's error shape.
//
// # Routing
//
// Power of two choices on ongoing requests among ready replicas below
// MaxConcurrentRequests; when none has room, a FIFO queue of
// MaxQueuedRequests; beyond it, 503 with Retry-After. A request whose
// replica is lost (its actor died, its host died, its server refused the
// connection) takes the replica out of routing at once, and is retried on
// another replica when the deployment is Idempotent; a stream retried so
// skips the chunks the client already has.
//
// # Autoscaling
//
// With Autoscaling set, the target number of replicas follows the ongoing
// requests (in flight plus queued) divided by TargetOngoingRequests,
// within MinReplicas and MaxReplicas, once the load has asked for the
// change for UpscaleDelay or DownscaleDelay. A new replica waits for a free
// slice in the background: traffic keeps flowing to the ready ones. A
// replica removed by a scale-down first leaves routing, finishes its
// requests (up to DrainTimeout), then releases its slice.
//
// # Health
//
// A serve.hostWatch task runs on every host of a ready replica for as long
// as the replica holds its slice: it fails when its host dies, which takes
// the replica out of routing at once, whatever the backend does to the
// slice's other hosts. Every Health.Period the router also checks that
// every host's actor is alive (and calls the [Check] method or GETs the
// process's HealthPath), each replica on its own, so that one check
// hanging until its Timeout holds up no other; FailureThreshold failures
// in a row replace the replica. A replaced replica releases its slice and a new one reserves a
// fresh slice.
//
// # Shutdown
//
// [Server.Shutdown] refuses new requests with 503, waits for the requests in
// flight, then drains and stops every replica and releases its slice. It is
// idempotent.
//
// # Errors
//
// Deploy returns an error naming the field for an invalid Deployment, and
// the reservation's error (InvalidArgument listing valid topologies,
// Infeasible naming the shapes the cluster has) when no replica can start.
// Clients get JSON errors: 400 for a body that does not decode into the
// endpoint's input, 404 for an unknown deployment, 408 for a body slower
// than Options.BodyTimeout, 413 for a body over Options.MaxBodyBytes
// (32 MiB), 500 with the user code's error, 502 when a process replica's
// server failed before responding and the request could not be retried,
// 503 (with Retry-After) when overloaded, lost or shutting down, 504 on
// timeout.
//
// # Concurrency
//
// A Server is safe for concurrent use. The host-0 actor of an [Actor]
// replica runs up to 2*MaxConcurrentRequests+2 calls at once.
package serve
