// Package worker runs registered tasks and actors in worker processes over
// the network: the protocol between a driver (the process holding the
// cluster handle) and its workers, the worker's server, the driver's
// client, and the launch of worker processes.
//
// Go cannot ship closures, so a worker is the user's own program started
// in worker mode: it registers the same tasks and actor classes at init,
// and ray.Main, called first in main, serves them when the process was
// launched as a worker (see [Launched], [ServeLaunched] and the Env*
// variables). Backends use this package; programs only call ray.Main.
//
// # Transport
//
// The driver dials the worker over TCP and opens the connection with an
// HTTP/1.1 request (net/http on the worker's side) that upgrades to a
// stream of length-prefixed binary frames, the way WebSocket does:
//
//	POST /goray/worker/connect HTTP/1.1
//	Authorization: Bearer <token>
//	Connection: Upgrade
//	Upgrade: goray-worker/1
//
//	{"fingerprint": "9f2c...", "manifest": {"codec": "json", "entries": [...]}, "maxMessageSize": ..., "heartbeatMillis": ...}
//
// The worker answers 101 Switching Protocols, or refuses with a status and
// a JSON body ({"code", "message", "manifest"}) that any HTTP tool can read.
// After the switch, both sides exchange frames: a 4-byte big-endian length,
// a type byte, then fields encoded as uvarints and length-prefixed bytes.
// Requests (run task, create actor, call method, cancel, drop actor) and
// replies (result, error) carry a request ID, so many calls are in flight
// on one connection at once; heartbeats flow both ways; a goodbye carries
// the reason a side drops the connection.
//
// Why not gRPC: it would add grpc-go, protobuf and generated code to the
// dependency footprint of every program that imports the SDK, for three
// request types. Why not a plain HTTP request per task: on a 2-core
// machine the per-request cost of HTTP caps throughput well below what
// one persistent connection gives. The choice keeps the SDK on the
// standard library: net/http does the parts that are easy to get wrong
// (request parsing, header limits, timeouts, status codes) and the frame
// codec is small enough to fuzz (FuzzDecodeMessage in the tests). Frames
// sent while a write is in progress are written together, so throughput
// comes from batching: one worker process serves over a hundred thousand
// no-op tasks per second on loopback (docs/workers.md). A worker runs a
// connection's work from one queue that a few goroutines take from, one
// job after another, so a burst of requests wakes a few goroutines, not
// one per request. A task that arrives with nothing else running on the
// connection (a synchronous round trip, or the first of a burst of
// requests read at once, and then each next one once the one before it
// returned) runs on the connection's reader, and a timer that fires every
// millisecond while such tasks run hands the reading to another goroutine
// when one runs longer; the requests read meanwhile go to the queue. The
// replies of what the reader runs, and on the driver the tasks its reader
// starts as results come in, are written by the reader in one write once
// it has handled what it read, before it reads again, without waking the
// writer goroutine. A plain TCP connection is read and written through
// its raw socket (on Linux without the runtime's syscall bookkeeping,
// which wakes the runtime's monitor thread whenever the process was idle
// just before: at every burst).
//
// # Handshake and version skew
//
// The handshake checks, in this order: the token (401), the protocol
// version in the Upgrade header (412), and the registry fingerprint
// ([Manifest.Fingerprint]): a SHA-256 of the codec and of every registered
// task, actor class and method with its Go types ([TypeString] names types
// by import path and lists the exported fields of structs). The driver
// sends its whole [Manifest] along, so that on a mismatch the error names
// what differs: a driver and a worker built from different code fail with
// FailedPrecondition such as
//
//	task "examples.square" is func(int) int in the driver but func(int) int64 in the worker
//
// An accepted handshake may carry env for the worker process
// ([ClientOptions.Env]): a launched worker sets it in its process env
// before it serves the connection ([ServerOptions.OnEnv]), as a backend
// does for a worker started before its reservation existed.
//
// # Limits and bad input
//
// Every message is bounded (ServerOptions.MaxMessageSize and
// ClientOptions.MaxMessageSize, 64 MiB by default; a connection uses the
// smaller of the two). A value too large to send fails its call at the
// sender with ResourceExhausted, naming the size and the limit, and the
// connection stays up. A frame that is garbled or over the limit ends its
// connection with a goodbye naming the problem (InvalidArgument or
// ResourceExhausted); the worker logs it and keeps serving its other
// connections. The decoder never panics and never allocates more than the
// bytes it was given justify.
//
// # Security
//
// A worker listens only on the address it is given (a launcher picks
// 127.0.0.1:0 by default) and serves only a driver that presents its
// token: a per-cluster random 256-bit token ([NewToken]). [StartProcess]
// hands it over through an inherited pipe ([EnvTokenFD]) that the worker
// reads and closes before any user code runs, so the token is never in the
// worker's environment or command line: /proc/<pid>/environ and cmdline
// show only the descriptor number. A launcher that cannot pass descriptors
// (a pod) can name a file instead ([EnvTokenFile], such as a mounted
// Secret), or, least safely, set [EnvToken]; the worker removes the
// variables from its environment, but the kernel's copy of the initial
// environment in /proc/<pid>/environ keeps EnvToken for the process's
// life. The token is compared in constant time. A worker runs only
// registered names: a request for anything else fails with NotFound
// without running code.
//
// Mutual TLS is optional on both ends (ServerOptions.TLS and
// ClientOptions.TLS). A backend that runs workers on a network it does not
// control creates a per-cluster [CA] (ECDSA P-256, valid for a day by
// default, its key only in the driver's memory), issues a worker
// certificate ([RoleWorker], for server authentication, named
// [TLSServerName]) and a driver certificate ([RoleDriver], for client
// authentication), and configures both ends with [Credentials.ServerConfig]
// and [Credentials.ClientConfig]: TLS 1.3, each side verifying that the
// other's certificate was signed by the cluster's CA for its role. A
// worker with TLS refuses a plain TCP driver and a driver whose
// certificate is missing or of another CA, before reading any HTTP (the
// refusals count in the bounded refusal log); a driver refuses a worker
// whose certificate is of another CA or for another role. These refusals
// fail Dial with FailedPrecondition, since retrying does not fix them. The
// token is still checked inside TLS. A launched worker serves TLS when its
// environment names credentials ([EnvTLSDir], or [EnvTLSCA], [EnvTLSCert]
// and [EnvTLSKey]); the Kubernetes backend sets them from its Secret.
// backend/local's worker processes use plain TCP on loopback with the
// token: their traffic never leaves the host.
//
// What another process on the same host can do: any local user can
// connect to the worker's loopback port, but without the token it is
// refused (and refusals are logged at a bounded rate). Other users cannot
// read the token: it is in no file, argument or environment they can
// read. A process of the same user is not a boundary the token defends
// against: it can read the worker's memory (ptrace or /proc/<pid>/mem,
// when the kernel's ptrace policy allows, as it does by default for a
// parent process and, with Yama's ptrace_scope 0, for any process of the
// user), or open the token pipe through /proc/<pid>/fd in the moment
// between the worker's start and its read. Run workers of different trust
// levels as different users. The token authenticates; it does not
// encrypt: without TLS, run workers on loopback or inside a trusted
// network, as Ray does.
//
// # Faults
//
// A call whose connection is lost (the worker process died, the network
// failed, heartbeats stopped for 5 intervals) fails with Unavailable;
// [ClientOptions].OnLost runs first, so that a backend can mark the
// worker's nodes dead and have the work retried per its options. OnLost
// may close its own client. Cancelling
// a call's context cancels the work in the worker. A worker exits when its
// driver goes away: at once when a launched worker's lifeline pipe closes
// (the driver process died or stopped it), and otherwise when no driver has
// been connected for the idle timeout.
//
// # Errors
//
// Errors cross the connection as data: the code, the operation and the
// message survive, and so does a *backend.TaskError (task, attempt,
// message, panic stack, HTTP status); context errors come back as
// themselves.
//
// # Concurrency
//
// [Client], [Server] and [Process] are safe for concurrent use.
package worker
