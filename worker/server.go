package worker

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goray-dev/goray/backend"
)

// Registry is what a worker serves: the registered names of its program and
// an executor for each codec a driver may use. Package ray provides the
// registry of the process (see ray.Main).
type Registry interface {
	// Entries lists the registered names with their types.
	Entries() []Entry
	// Executor returns an executor that decodes and encodes values with the
	// named codec, or an error naming the codecs it has.
	Executor(codec string) (backend.Executor, error)
}

// ServerOptions configures a [Server].
type ServerOptions struct {
	// Token authenticates the driver: the handshake must carry it. It is
	// required; a backend generates a random one per cluster.
	Token string
	// TLS, if set, makes the worker serve mutual TLS only: it presents its
	// certificate and, with [Credentials.ServerConfig], requires a driver
	// certificate signed by the cluster's CA. A plain TCP driver, or one
	// whose certificate the config does not verify, is refused before any
	// HTTP is read. nil means plain TCP (the token still authenticates).
	TLS *tls.Config
	// MaxMessageSize bounds one message in either direction; 0 means
	// DefaultMaxMessageSize. A connection uses the smaller of the
	// driver's and the worker's bounds.
	MaxMessageSize int
	// IdleTimeout makes Serve return ErrNoDriver once no driver has been
	// connected for this long (counting from the start, until the first
	// driver connects). 0 means never.
	IdleTimeout time.Duration
	// Logger receives the worker's logs: drivers connecting and leaving,
	// rejected handshakes, dropped connections. nil discards them.
	Logger *slog.Logger
	// RefusalLogPeriod bounds the logging of refused handshakes to one
	// line per period, which carries the count of the refusals held back
	// since the previous line; 0 means DefaultRefusalLogPeriod.
	RefusalLogPeriod time.Duration
	// OnForceCancel is called when a driver cancels a running task with
	// Force (backend.CancelOptions): it should end the process, which is
	// what a launched worker ([ServeLaunched]) does, with exit code
	// [ExitForceCancel]. nil cancels the task's context as without Force.
	OnForceCancel func(task string)
	// OnEnv, if set, is called with a connecting driver's
	// ClientOptions.Env (when it has one) after the handshake is accepted
	// and before the connection serves anything; an error refuses the
	// driver. A launched worker ([ServeLaunched]) sets its process env
	// from it.
	OnEnv func(env map[string]string) error
}

// ExitForceCancel is the exit code of a launched worker ended by a forced
// cancel of a task it ran.
const ExitForceCancel = 3

// ErrNoDriver is returned by [Server.Serve] when no driver has been
// connected for ServerOptions.IdleTimeout.
var ErrNoDriver = errors.New("no driver connected within the idle timeout")

// Server serves a registry to authenticated drivers: it runs the tasks,
// actor constructors and methods they ask for, and nothing that is not
// registered. Each connection is independent: a garbled message or a
// failure ends only its own connection, and the actors created through a
// connection live as long as it does.
//
// Create one with [NewServer]; the zero value is not usable. A Server is
// safe for concurrent use and serves once.
type Server struct {
	reg     Registry
	entries Manifest
	token   [sha256.Size]byte
	limit   int
	idle    time.Duration
	log     *slog.Logger
	refused *refusalLog
	onForce func(task string)
	onEnv   func(env map[string]string) error
	// lastAlone is the last work that ended with nothing else running,
	// at lastAloneAt after born, for naming output read after it ended
	// (s.mu). An offset on the monotonic clock costs one clock reading
	// per task where time.Now costs two.
	lastAlone   workLabel
	lastAloneAt time.Duration
	born        time.Time
	tls         *tls.Config
	// tick is the period of the watch of tasks run on a connection's
	// reader: loneTick (tests may lengthen it).
	tick time.Duration

	mu      sync.Mutex
	closed  bool
	conns   map[*serverConn]struct{}
	idleT   *time.Timer
	execs   map[string]backend.Executor
	wg      sync.WaitGroup
	serving bool
}

// NewServer returns a server of reg. It fails with InvalidArgument when
// the options have no token or a message bound below MinMaxMessageSize.
func NewServer(reg Registry, opts *ServerOptions) (*Server, error) {
	const op = "create worker server"
	if reg == nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "nil registry")
	}
	if opts == nil {
		opts = &ServerOptions{}
	}
	if opts.Token == "" {
		return nil, backend.Errorf(backend.InvalidArgument, op, "empty token: a worker serves only an authenticated driver")
	}
	limit, err := messageLimit(op, opts.MaxMessageSize)
	if err != nil {
		return nil, err
	}
	s := &Server{
		reg: reg, entries: Manifest{Entries: reg.Entries()}, token: sha256.Sum256([]byte(opts.Token)),
		limit: limit, idle: opts.IdleTimeout, log: opts.Logger, onForce: opts.OnForceCancel, onEnv: opts.OnEnv,
		conns: map[*serverConn]struct{}{}, execs: map[string]backend.Executor{}, tick: loneTick, born: time.Now(),
	}
	s.entries.Sort()
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.refused = newRefusalLog(s.log, opts.RefusalLogPeriod)
	if opts.TLS != nil {
		s.tls = opts.TLS.Clone()
		s.tls.NextProtos = []string{"http/1.1"} // the upgrade needs HTTP/1.1, never h2
	}
	return s, nil
}

func messageLimit(op string, n int) (int, error) {
	switch {
	case n == 0:
		return DefaultMaxMessageSize, nil
	case n < MinMaxMessageSize:
		return 0, backend.Errorf(backend.InvalidArgument, op, "MaxMessageSize %d is below the minimum %d", n, MinMaxMessageSize)
	}
	return n, nil
}

// Serve accepts drivers on ln until ctx ends, the idle timeout passes
// without a driver, or ln fails. It closes ln and every connection,
// cancels the contexts of running work and waits for it to return before
// it returns: ctx.Err() (unwrapped), ErrNoDriver, or the listener's error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.serving || s.closed {
		s.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, "serve worker", "a server serves once")
	}
	s.serving = true
	var idleC <-chan time.Time
	if s.idle > 0 {
		s.idleT = time.NewTimer(s.idle)
		idleC = s.idleT.C
	}
	s.mu.Unlock()

	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(serverLogWriter{s}, "", 0),
	}
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case <-idleC:
		err = ErrNoDriver
	case err = <-served:
		served <- err
	}
	s.mu.Lock()
	s.closed = true
	if s.idleT != nil {
		s.idleT.Stop()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for sc := range s.conns {
		conns = append(conns, sc)
	}
	s.mu.Unlock()
	hs.Close()
	<-served
	s.refused.flush()
	for _, sc := range conns {
		sc.goodbye(backend.Errorf(backend.Unavailable, "", "worker shutting down: %v", err))
	}
	s.wg.Wait()
	return err
}

// serverLogWriter takes net/http's log lines: a failed TLS handshake (a
// driver without TLS or with a certificate of another CA) counts as a
// refusal, logged at a bounded rate; other lines are warnings.
type serverLogWriter struct{ s *Server }

func (w serverLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		remote, reason, _ := strings.Cut(rest, ": ")
		w.s.refused.note(remote, 0, "TLS handshake: "+reason)
		return len(p), nil
	}
	w.s.log.Warn("goray worker: " + line)
	return len(p), nil
}

// helloRequest is the body of the handshake request.
// workLabel names running work for the lines of output it writes.
type workLabel struct {
	// The work is "task <name>" (task set), "actor <class>" (method
	// empty) or "actor <class>.<method>"; the string is made when a line
	// needs it, not per task.
	name, method string
	node         string
	task         bool
}

// source names the work for its lines of output.
func (l workLabel) source() string {
	switch {
	case l.name == "":
		return ""
	case l.task:
		return "task " + l.name
	case l.method == "":
		return "actor " + l.name
	}
	return "actor " + l.name + "." + l.method
}

type helloRequest struct {
	// Fingerprint is the driver's Manifest.Fingerprint: equal
	// fingerprints mean the same code; on a mismatch the manifests say
	// what differs.
	Fingerprint string   `json:"fingerprint"`
	Manifest    Manifest `json:"manifest"`
	MaxMsg      int      `json:"maxMessageSize"`
	Heartbeat   int64    `json:"heartbeatMillis"`
	// Output asks for the worker's output (ClientOptions.OnOutput).
	Output bool `json:"output,omitempty"`
	// Env is ClientOptions.Env.
	Env map[string]string `json:"env,omitempty"`
}

// handshakeError is the body of a refused handshake.
type handshakeError struct {
	Code     string   `json:"code"`
	Message  string   `json:"message"`
	Manifest Manifest `json:"manifest,omitzero"`
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, code backend.Code, msg string, m Manifest) {
	s.refused.note(r.RemoteAddr, status, msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(handshakeError{Code: code.String(), Message: msg, Manifest: m}) //nolint:errcheck // the driver may be gone
}

// ServeHTTP implements the handshake: the driver POSTs its manifest with
// the token as a bearer credential and asks to upgrade to the frame
// protocol; the worker checks the token, then the protocol version, then
// the manifest, and switches protocols or refuses with a JSON error.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != connectPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(tok))
	if !ok || subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
		s.refuse(w, r, http.StatusUnauthorized, backend.FailedPrecondition, "the driver's token is missing or wrong", Manifest{})
		return
	}
	if up := r.Header.Get("Upgrade"); up != protocolName {
		s.refuse(w, r, http.StatusPreconditionFailed, backend.FailedPrecondition,
			fmt.Sprintf("protocol version mismatch: the driver speaks %q, this worker speaks %q; build both from the same version of goray", up, protocolName), Manifest{})
		return
	}
	var hello helloRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxHelloSize)).Decode(&hello); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.refuse(w, r, http.StatusRequestEntityTooLarge, backend.ResourceExhausted, fmt.Sprintf("handshake larger than %s", sizeString(maxHelloSize)), Manifest{})
			return
		}
		s.refuse(w, r, http.StatusBadRequest, backend.InvalidArgument, "bad handshake body: "+err.Error(), Manifest{})
		return
	}
	mine := s.entries
	mine.Codec = hello.Manifest.Codec
	if fp := mine.Fingerprint(); hello.Fingerprint != fp || hello.Manifest.Fingerprint() != fp {
		diff := Diff(hello.Manifest, mine)
		if diff == "" {
			diff = fmt.Sprintf("registry fingerprint %.12s differs from the worker's %.12s", hello.Fingerprint, fp)
		}
		s.refuse(w, r, http.StatusPreconditionFailed, backend.FailedPrecondition,
			"the driver and the worker were built from different code: "+diff, mine)
		return
	}
	exec, err := s.executor(hello.Manifest.Codec)
	if err != nil {
		s.refuse(w, r, http.StatusPreconditionFailed, backend.FailedPrecondition, err.Error(), Manifest{})
		return
	}
	limit := s.limit
	if hello.MaxMsg >= MinMaxMessageSize && hello.MaxMsg < limit {
		limit = hello.MaxMsg
	}
	hb := time.Duration(hello.Heartbeat) * time.Millisecond
	if hb <= 0 {
		hb = DefaultHeartbeat
	}
	hb = max(hb, 10*time.Millisecond)
	if len(hello.Env) > 0 && s.onEnv != nil {
		if err := s.onEnv(hello.Env); err != nil {
			s.refuse(w, r, http.StatusBadRequest, backend.InvalidArgument, "the driver's env: "+err.Error(), Manifest{})
			return
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.refuse(w, r, http.StatusServiceUnavailable, backend.Unavailable, "worker shutting down", Manifest{})
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	hj, ok := w.(http.Hijacker)
	if !ok {
		s.refuse(w, r, http.StatusInternalServerError, backend.Internal, "connection cannot be upgraded", Manifest{})
		return
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		s.log.Warn("goray worker: hijack failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	nc.SetDeadline(time.Time{}) //nolint:errcheck // clear the server's read timeout
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: %s\r\nConnection: Upgrade\r\n%s: %d\r\n%s: %d\r\n\r\n",
		protocolName, headerMaxMessage, limit, headerPID, os.Getpid())
	if err := brw.Flush(); err != nil {
		nc.Close()
		return
	}
	sc := &serverConn{
		conn: newConn(nc, brw.Reader, limit, hb, s.log), s: s, exec: exec, remote: r.RemoteAddr,
		actors: map[uint64]*actorSlot{},
		output: hello.Output, wakeup: make(chan struct{}, maxIdleRunners),
	}
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	if !s.add(sc) {
		sc.close(errors.New("worker shutting down"))
		return
	}
	s.log.Info("goray worker: driver connected", "remote", r.RemoteAddr, "codec", hello.Manifest.Codec)
	sc.serve()
	s.remove(sc)
}

const (
	headerMaxMessage = "Goray-Max-Message-Size"
	headerPID        = "Goray-Worker-Pid"
)

func (s *Server) executor(codec string) (backend.Executor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.execs[codec]; x != nil {
		return x, nil
	}
	x, err := s.reg.Executor(codec)
	if err != nil {
		return nil, err
	}
	s.execs[codec] = x
	return x, nil
}

func (s *Server) add(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[sc] = struct{}{}
	if s.idleT != nil {
		s.idleT.Stop()
	}
	return true
}

func (s *Server) remove(sc *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, sc)
	if len(s.conns) == 0 && s.idleT != nil && !s.closed {
		s.idleT.Reset(s.idle)
	}
}

// serverConn is one driver's connection.
type serverConn struct {
	*conn
	s      *Server
	exec   backend.Executor
	remote string
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	running idTable[runEntry] // the running work, by request ID
	output  bool              // the driver asked for the worker's output
	actors  map[uint64]*actorSlot
	work    sync.WaitGroup
	// The queue of work to run (spawn) and the runner goroutines that
	// take from it: qmu guards q, qhead, nIdle, searching and qclosed.
	// An idle runner waits for a token on wakeup.
	qmu       sync.Mutex
	q         []job
	qhead     int
	nIdle     int // runners waiting on wakeup
	searching int // runners woken or started that have not taken a job yet
	qclosed   bool
	wakeup    chan struct{} // capacity maxIdleRunners: a send never waits

	// A lone task runs on the reader (runLone): inline is that run's
	// number (from loneSeq) while it runs there with the reading not
	// handed over, else 0. watch is the timer whose goroutine takes over
	// the reading from a lone task still running at its firing
	// (loneTick); it fires every loneTick while lone tasks run (watching
	// says it is set). served closes once the connection's work has
	// ended (read).
	inline   atomic.Uint64
	loneSeq  atomic.Uint64
	seenSeq  atomic.Uint64 // loneSeq at the watch's last firing
	watching atomic.Bool
	watch    *time.Timer
	served   chan struct{}
}

// loneTick is the period of the watch of lone tasks run on the reader: a
// frame that arrives while one runs (a cancellation, the next request, a
// heartbeat) is read at most about two periods later. Resetting a timer
// per task would cost about what running the task on the reader saves
// (the runtime wakes a thread for a timer that becomes the earliest), so
// one timer fires periodically while lone tasks run, and stops once a
// period has seen none.
const loneTick = time.Millisecond

// runEntry is running work: its cancellation (a task's context, or the
// cancel function of other work's) and its output label.
type runEntry struct {
	run    *runCtx
	cancel context.CancelFunc
	lbl    workLabel
}

// live reports whether e is an entry (not the zero value of a missing one).
func (e runEntry) live() bool { return e.run != nil || e.cancel != nil }

// stop cancels the work's context.
func (e runEntry) stop() {
	switch {
	case e.run != nil:
		e.run.cancel()
	case e.cancel != nil:
		e.cancel()
	}
}

// cloneInfo returns a copy of info (nil for nil): a handler does not keep
// a message's info, which the reader reuses.
func cloneInfo(info *backend.RuntimeInfo) *backend.RuntimeInfo {
	if info == nil {
		return nil
	}
	c := *info
	return &c
}

// actorSlot is an actor created through the connection. inst is nil while
// its constructor runs.
type actorSlot struct {
	class  string
	inst   backend.ActorInstance
	ctx    context.Context
	cancel context.CancelFunc
}

func (sc *serverConn) serve() {
	sc.served = make(chan struct{})
	sc.watch = time.AfterFunc(time.Hour, sc.loneTick)
	sc.watch.Stop()
	sc.start()
	sc.read()
	<-sc.served
}

// read reads the connection's frames until it ends, then ends the
// connection's work (closing served); or until a lone task's run hands
// the reading over (runLone). Whichever goroutine reads last ends the
// work: the first one may be running a lone task that waits to be
// cancelled.
func (sc *serverConn) read() {
	if sc.readLoop(sc.handle) == errHandedOver {
		return
	}
	defer close(sc.served)
	sc.watching.Store(true) // no more firings
	sc.watch.Stop()
	// The reader was the only caller of spawn: the runners exit once the
	// queue is empty.
	sc.closeQueue()
	<-sc.done // a goodbye is flushed, or times out, before the connection closes
	cause := sc.conn.cause
	sc.cancel()
	sc.mu.Lock()
	for e := range sc.running.values() {
		e.stop() // tasks' contexts do not derive from sc.ctx
	}
	sc.mu.Unlock()
	sc.work.Wait()
	sc.wg.Wait()
	sc.s.mu.Lock()
	shutdown := sc.s.closed
	sc.s.mu.Unlock()
	var re *remoteError
	switch {
	case shutdown, errors.Is(cause, io.EOF), errors.Is(cause, syscall.ECONNRESET),
		errors.As(cause, &re) && errors.Is(re.err, backend.ErrClosed):
		sc.s.log.Info("goray worker: driver disconnected", "remote", sc.remote, "cause", cause)
	default:
		sc.s.log.Warn("goray worker: connection dropped", "remote", sc.remote, "cause", cause)
	}
}

// loneTick is the watch's firing: when the reader still runs a lone
// task, this goroutine becomes the reader (it may have started just
// before: it only loses the reading early). The watch fires again while
// lone tasks ran since its last firing.
func (sc *serverConn) loneTick() {
	n := sc.inline.Load()
	take := n != 0 && sc.inline.CompareAndSwap(n, 0)
	if seq := sc.loneSeq.Load(); seq != sc.seenSeq.Load() || take {
		sc.seenSeq.Store(seq)
		sc.watch.Reset(sc.s.tick)
	} else {
		sc.watching.Store(false)
		// A lone task that began between the load and the store found
		// watching set and did not start the watch: look again.
		if sc.inline.Load() != 0 && sc.watching.CompareAndSwap(false, true) {
			sc.watch.Reset(sc.s.tick)
		}
	}
	if take {
		sc.read()
	}
}

// errHandedOver ends a reader's readLoop when another goroutine has taken
// over the reading (loneTick) while it ran a lone task.
var errHandedOver = errors.New("the reading was handed over")

// runLone runs task j on the reader when it is lone: no other work runs
// on the connection (a queued job is running work too), as in a
// synchronous round trip, or in a burst of requests read at once whose
// tasks are short: each runs when the one before it has returned. That
// spares waking a runner goroutine, which costs more than the task when
// it is short. The reply is held (sendHeld): the reader writes the
// replies of a burst in one write before it reads from the socket again.
//
// Should a task still run on the reader when the watch fires (loneTick),
// the watch's goroutine takes over the reading, so that a cancellation,
// the rest of the burst or a heartbeat is read meanwhile; the requests it
// reads while that task runs go to runners, since the task is running
// work. The task's goroutine then writes its reply and ends as a reader
// (errHandedOver). It reports whether it ran j.
func (sc *serverConn) runLone(j job) (ran bool, err error) {
	sc.mu.Lock()
	alone := sc.running.len() == 1
	sc.mu.Unlock()
	// A reply sent past the high-water mark does not wait (a reader
	// that waited for the writer could deadlock with a driver whose
	// reader waits for its own): run here only with room in the queue.
	if !alone || sc.queued() >= highWater/2 {
		return false, nil
	}
	n := sc.loneSeq.Add(1)
	sc.inline.Store(n)
	if !sc.watching.Load() && sc.watching.CompareAndSwap(false, true) {
		sc.watch.Reset(sc.s.tick)
	}
	sc.work.Add(1) // as a runner's: serve waits for it once the reading ends
	v, rerr := sc.exec.RunTask(j.ctx, j.name, j.arg, j.info)
	sc.end(j.id)
	sc.replyOp(j.id, v, rerr, sendHeld, "task ", j.name)
	sc.work.Done()
	if sc.inline.CompareAndSwap(n, 0) {
		return true, nil // still the reader: it writes the reply
	}
	// loneTick's goroutine reads now (and may run lone tasks of its
	// own, with numbers other than n); it may be waiting on the socket.
	sc.release()
	return true, errHandedOver
}

func (sc *serverConn) handle(m *message) error {
	switch m.typ {
	case msgRunTask:
		if !sc.exec.HasTask(m.name) {
			sc.replyError(m.id, backend.Errorf(backend.NotFound, "run task "+m.name, "task %q is not registered in this worker", m.name))
			return nil
		}
		// A task's context has no parent: serve cancels the running
		// tasks one by one when the connection ends, which spares a
		// registration with the connection's context per task.
		rc := newRunCtx(m.info, m.infoShared)
		if !sc.begin(m.id, runEntry{run: rc, lbl: workLabel{name: m.name, node: nodeOf(m.info), task: true}}) {
			return fmt.Errorf("request ID %d is already running", m.id)
		}
		j := job{ctx: rc, id: m.id, name: m.name, arg: m.value, info: rc.runInfo()}
		if ran, err := sc.runLone(j); ran {
			return err
		}
		sc.spawn(j)
	case msgNewActor:
		if !sc.exec.HasActorMethod(m.name, "") {
			sc.replyError(m.id, backend.Errorf(backend.NotFound, "create actor "+m.name, "actor class %q is not registered in this worker", m.name))
			return nil
		}
		sc.mu.Lock()
		if _, dup := sc.actors[m.actor]; dup {
			sc.mu.Unlock()
			return fmt.Errorf("actor %d already exists", m.actor)
		}
		if _, dup := sc.running.get(m.id); dup {
			sc.mu.Unlock()
			return fmt.Errorf("request ID %d is already running", m.id)
		}
		ctx, cancel := context.WithCancel(sc.ctx)
		sc.actors[m.actor] = &actorSlot{class: m.name, ctx: ctx, cancel: cancel}
		// Cancelling the creation drops the actor.
		sc.running.put(m.id, runEntry{cancel: cancel, lbl: workLabel{name: m.name, node: nodeOf(m.info)}})
		sc.mu.Unlock()
		sc.work.Add(1)
		go sc.newActor(ctx, m.id, m.actor, m.name, m.value, cloneInfo(m.info))
	case msgCall:
		sc.mu.Lock()
		a := sc.actors[m.actor]
		var inst backend.ActorInstance
		if a != nil {
			inst = a.inst
		}
		sc.mu.Unlock()
		op := "call " + m.name
		switch {
		case inst == nil:
			sc.replyError(m.id, backend.Errorf(backend.ActorDied, op, "actor %d is not alive in this worker", m.actor))
			return nil
		case !sc.exec.HasActorMethod(a.class, m.name):
			sc.replyError(m.id, backend.Errorf(backend.NotFound, op, "method %q of actor class %q is not registered in this worker", m.name, a.class))
			return nil
		}
		ctx, cancel := context.WithCancel(a.ctx)
		if !sc.begin(m.id, runEntry{cancel: cancel, lbl: workLabel{name: a.class, method: m.name, node: nodeOf(m.info)}}) {
			cancel()
			return fmt.Errorf("request ID %d is already running", m.id)
		}
		sc.spawn(job{ctx: ctx, id: m.id, name: m.name, arg: m.value, info: cloneInfo(m.info), inst: inst})
	case msgCancel:
		sc.mu.Lock()
		e, _ := sc.running.get(m.id)
		sc.mu.Unlock()
		e.stop()
	case msgKill:
		sc.mu.Lock()
		e, _ := sc.running.get(m.id)
		sc.mu.Unlock()
		switch {
		case !e.live() || !e.lbl.task: // finished, or not a task
		case sc.s.onForce != nil:
			sc.s.log.Warn("goray worker: a driver cancelled a running task with Force; the process ends", "task", e.lbl.source())
			sc.s.onForce(e.lbl.source())
		default:
			e.stop()
		}
	case msgDropActor:
		sc.mu.Lock()
		a := sc.actors[m.actor]
		delete(sc.actors, m.actor)
		sc.mu.Unlock()
		if a != nil {
			a.cancel()
		}
	default:
		return fmt.Errorf("a worker does not accept %v messages", m.typ)
	}
	return nil
}

// begin registers a running request, unless its ID is running already.
func (sc *serverConn) begin(id uint64, e runEntry) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, dup := sc.running.get(id); dup {
		return false
	}
	sc.running.put(id, e)
	return true
}

// end unregisters running request id, and reports whether its reply is
// a lone frame (send's lone): no other work runs on the connection and
// the reader has no more requests buffered.
func (sc *serverConn) end(id uint64) (lone bool) {
	if sc.output {
		// Output names a line by what runs and what last ended alone,
		// under s.mu: the request leaves running and is recorded as
		// ended in one step for it, or a line read between the two is
		// named by neither.
		sc.s.mu.Lock()
	}
	sc.mu.Lock()
	e, labelled := sc.running.take(id)
	alone := sc.running.len() == 0 // on this connection; endedLocked checks the others
	sc.mu.Unlock()
	if sc.output {
		if labelled && alone {
			sc.s.endedLocked(sc, e.lbl)
		}
		sc.s.mu.Unlock()
	}
	e.stop()
	return alone && !sc.backlog.Load()
}

// job is a task run or an actor method call (inst set) for a pool
// goroutine.
type job struct {
	ctx  context.Context
	id   uint64
	name string
	arg  backend.Value
	info *backend.RuntimeInfo
	inst backend.ActorInstance
}

// maxIdleRunners bounds the goroutines a connection keeps for running
// work. Reusing a goroutine keeps the stack it grew, so a task does not
// pay for stack growth again.
const maxIdleRunners = 64

// spawn queues j for the connection's runner goroutines. The work of a
// burst of requests is taken by a few runners, each running one job
// after another, instead of one goroutine woken per job: a runner that
// takes a job and leaves more queued makes sure another runner comes for
// them (a woken idle one or a new one), unless one is on its way
// already (searching), so a job that blocks holds up only its own runner
// and queued work always has a runner coming. The goroutines are counted
// in sc.work and exit once the queue is closed and empty (serve, once
// the reader, the only caller of spawn, has ended). A job goes by value,
// sparing an allocation per request.
func (sc *serverConn) spawn(j job) {
	sc.qmu.Lock()
	sc.q = append(sc.q, j)
	start := sc.moreLocked()
	sc.qmu.Unlock()
	sc.startRunner(start)
}

// moreLocked makes sure that a runner comes for the queued work, with qmu
// held: it counts one in searching, unless one is on its way already, and
// reports how: wake an idle runner, start a new one, or neither.
func (sc *serverConn) moreLocked() runnerStart {
	if sc.searching > 0 {
		return noRunner
	}
	sc.searching++
	if sc.nIdle > 0 {
		sc.nIdle--
		return wakeRunner
	}
	return newRunner
}

type runnerStart uint8

const (
	noRunner runnerStart = iota
	wakeRunner
	newRunner
)

// startRunner does what moreLocked decided, without qmu.
func (sc *serverConn) startRunner(how runnerStart) {
	switch how {
	case wakeRunner:
		sc.wakeup <- struct{}{}
	case newRunner:
		sc.work.Add(1)
		go sc.runner()
	}
}

// closeQueue tells the runners to exit once the queue is empty, waking
// the idle ones.
func (sc *serverConn) closeQueue() {
	sc.qmu.Lock()
	sc.qclosed = true
	n := sc.nIdle
	sc.nIdle = 0
	sc.searching += n
	sc.qmu.Unlock()
	for range n {
		sc.wakeup <- struct{}{}
	}
}

// runner runs queued jobs until the queue is empty, then waits idle for
// more (or exits when maxIdleRunners wait already, or the queue is
// closed). It starts searching: counted in sc.searching until it takes a
// job or finds none.
func (sc *serverConn) runner() {
	defer sc.work.Done()
	searching := true
	for {
		sc.qmu.Lock()
		if searching {
			sc.searching--
			searching = false
		}
		if sc.qhead == len(sc.q) {
			sc.q, sc.qhead = sc.q[:0], 0
			if sc.qclosed || sc.nIdle >= maxIdleRunners {
				sc.qmu.Unlock()
				return
			}
			sc.nIdle++
			sc.qmu.Unlock()
			<-sc.wakeup
			searching = true // the waker counted this runner in
			continue
		}
		j := sc.q[sc.qhead]
		sc.q[sc.qhead] = job{}
		sc.qhead++
		start := noRunner
		if sc.qhead < len(sc.q) {
			start = sc.moreLocked()
		}
		sc.qmu.Unlock()
		sc.startRunner(start)
		if j.inst != nil {
			sc.call(j.ctx, j.id, j.inst, j.name, j.arg, j.info)
		} else {
			sc.runTask(j.ctx, j.id, j.name, j.arg, j.info)
		}
	}
}

func (sc *serverConn) runTask(ctx context.Context, id uint64, name string, arg backend.Value, info *backend.RuntimeInfo) {
	v, err := sc.exec.RunTask(ctx, name, arg, info)
	sc.replyOp(id, v, err, sc.ended(id), "task ", name)
}

// ended unregisters running request id (end) and says how to send its
// reply: lone, written by the runner, when it is a lone frame.
func (sc *serverConn) ended(id uint64) sendHow {
	if sc.end(id) {
		return sendLone
	}
	return sendQueued
}

func (sc *serverConn) newActor(ctx context.Context, id, key uint64, class string, arg backend.Value, info *backend.RuntimeInfo) {
	defer sc.work.Done()
	inst, err := sc.exec.NewActor(ctx, class, arg, info)
	sc.mu.Lock()
	sc.running.take(id)
	a := sc.actors[key]
	switch {
	case a == nil || ctx.Err() != nil:
		// Dropped or cancelled while constructing.
		delete(sc.actors, key)
		if err == nil {
			err = ctx.Err()
			if err == nil {
				err = context.Canceled
			}
		}
	case err != nil:
		delete(sc.actors, key)
	default:
		a.inst = inst
	}
	sc.mu.Unlock()
	if err != nil && a != nil {
		a.cancel()
	}
	sc.reply(id, backend.Value{}, err)
}

func (sc *serverConn) call(ctx context.Context, id uint64, inst backend.ActorInstance, method string, arg backend.Value, info *backend.RuntimeInfo) {
	v, err := inst.Call(ctx, method, arg, info)
	sc.replyOp(id, v, err, sc.ended(id), "method ", method)
}

func (sc *serverConn) reply(id uint64, v backend.Value, err error) {
	sc.replyOp(id, v, err, sendQueued, "", "")
}

// replyError sends err as the reply of request id from the reader
// goroutine, past the high-water mark: a reader that waited for the
// writer could deadlock with a driver whose reader waits for its own
// writer too.
func (sc *serverConn) replyError(id uint64, err error) {
	sc.send(&message{typ: msgError, id: id, err: err}, true, false) //nolint:errcheck // a closed connection has its cause already
}

// replyOp sends a result or an error, as how says (see send and
// sendHeld; a held reply, the reader's, does not wait at the high-water
// mark). A result that cannot be sent (too large, not encoded) is
// replaced by an error saying so.
func (sc *serverConn) replyOp(id uint64, v backend.Value, err error, how sendHow, kind, name string) {
	force := how == sendHeld
	if err != nil {
		sc.enqueue(&message{typ: msgError, id: id, err: err}, force, how) //nolint:errcheck // a closed connection has its cause already
		return
	}
	serr := sc.enqueue(&message{typ: msgResult, id: id, value: v}, force, how)
	if serr == nil || connClosed(serr) {
		return
	}
	code := backend.CodeOf(serr)
	sc.enqueue(&message{typ: msgError, id: id, err: backend.Errorf(code, "worker", "result of %s cannot be sent to the driver: %v", kind+name, errors.Unwrap(serr))}, force, how) //nolint:errcheck
}

// connClosed reports whether err is a send's on a closed connection. Its
// own function: the target errors.As writes to escapes, and a variable
// for it in replyOp would cost an allocation per result sent.
func connClosed(err error) bool {
	var closed *errConnClosed
	return errors.As(err, &closed)
}

// Output sends a line that this process wrote to its stdout (stream 1) or
// stderr (2) to every connected driver that asked for output, and reports
// whether one did. The line names the work that wrote it when exactly one
// task, actor constructor or method runs in the process, or, when none
// runs, the last one that ran alone and ended within a second (a line is
// read after its writer may have returned): a process-wide stream cannot
// tell more, so the name is a best guess and lines written while several
// run are not named.
func (s *Server) Output(stream int, line []byte) bool {
	conns, lbl := s.outputTo()
	if len(conns) == 0 {
		return false
	}
	sent := false
	for _, sc := range conns {
		m := &message{typ: msgOutput, id: uint64(stream), name: lbl.source(), node: lbl.node, value: backend.Value{Data: line}}
		if sc.conn.send(m, false, false) == nil {
			sent = true
		}
	}
	return sent
}

// outputTo returns the connections whose drivers asked for output and
// the work a line read now comes from (see Output).
func (s *Server) outputTo() ([]*serverConn, workLabel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var conns []*serverConn
	for sc := range s.conns {
		if sc.output {
			conns = append(conns, sc)
		}
	}
	if len(conns) == 0 {
		return nil, workLabel{}
	}
	return conns, s.outputLabelLocked(conns)
}

// outputLabelLocked names the work a line of output comes from (see
// Output), with s.mu held.
func (s *Server) outputLabelLocked(conns []*serverConn) workLabel {
	var lbl workLabel
	n := 0
	for _, sc := range conns {
		sc.mu.Lock()
		for e := range sc.running.values() {
			lbl = e.lbl
			n++
		}
		sc.mu.Unlock()
	}
	switch {
	case n == 1:
		return lbl
	case n == 0:
		if time.Since(s.born)-s.lastAloneAt < time.Second {
			return s.lastAlone
		}
	}
	return workLabel{}
}

// endedLocked records, with s.mu held, that work labelled lbl ended with
// nothing else running on its connection, from: it was alone in the
// process if no connection runs work now. With from the only connection
// (the usual case: a worker serves its driver) it looks at from alone: a
// map's iteration draws a random number and costs more than what it
// follows in a burst of short tasks.
func (s *Server) endedLocked(from *serverConn, lbl workLabel) {
	busy := false
	if _, ok := s.conns[from]; ok && len(s.conns) == 1 {
		busy = from.busy()
	} else {
		for sc := range s.conns {
			if busy = sc.busy(); busy {
				break
			}
		}
	}
	if busy {
		s.lastAlone, s.lastAloneAt = workLabel{}, 0
		return
	}
	s.lastAlone, s.lastAloneAt = lbl, time.Since(s.born)
}

// busy reports whether work runs on the connection.
func (sc *serverConn) busy() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.running.len() > 0
}
