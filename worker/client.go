package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// ClientOptions configures [Dial].
type ClientOptions struct {
	// Token is the worker's token.
	Token string
	// TLS, if set, makes the connection mutual TLS: the driver verifies
	// the worker's certificate with it and presents its own (see
	// [Credentials.ClientConfig]). nil means plain TCP, which a worker
	// with ServerOptions.TLS refuses.
	TLS *tls.Config
	// Manifest describes the driver's code; the worker refuses a driver
	// whose manifest differs from its own. Get it from the cluster's
	// executor with [ManifestOf].
	Manifest Manifest
	// MaxMessageSize bounds one message in either direction; 0 means
	// DefaultMaxMessageSize. The connection uses the smaller of the
	// driver's and the worker's bounds.
	MaxMessageSize int
	// Heartbeat is the heartbeat interval of the connection (both sides
	// use it); 0 means DefaultHeartbeat. A side that hears nothing for 5
	// intervals drops the connection.
	Heartbeat time.Duration
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// OnLost, if set, is called once when the connection is lost (not when
	// the client is closed), with the cause, before the calls in flight
	// fail with Unavailable. A backend uses it to mark the worker's nodes
	// dead first, so that the failed calls are retried per their options.
	OnLost func(err error)
	// OnOutput, if set, receives the lines the worker process's code
	// writes to its stdout and stderr (see [Output]), in order, on the
	// connection's reader goroutine: it must not block for long.
	OnOutput func(Output)
	// Env, if set, is sent to the worker in the handshake: a launched
	// worker ([ServeLaunched]) sets it in its process env before it runs
	// anything, so that the processes its work starts inherit it. A
	// backend passes a reservation's env this way to a worker that was
	// started before the reservation existed (Kubernetes: a capacity pod
	// that becomes a worker pod).
	Env map[string]string
}

// Output is a line a worker process wrote.
type Output struct {
	// Stream is 1 for stdout, 2 for stderr.
	Stream int
	// Source is the work that wrote it ("task <name>", "actor <class>" or
	// "actor <class>.<method>") when it was the only work running in the
	// process, else "". Node is that work's node.
	Source, Node string
	// Line is the line, without its line break.
	Line []byte
	// PID is the worker process's.
	PID int
}

// Client is a driver's connection to one worker. It implements
// backend.Executor: a backend hands it the work to run in the worker.
// Calls are multiplexed on one TCP connection; cancelling a call's context
// cancels the work in the worker and returns ctx.Err() at once.
//
// When the connection is lost, calls fail with Unavailable naming the
// cause. Create clients with [Dial]; a Client is safe for concurrent use.
type Client struct {
	conn    *conn
	addr    string
	pid     int
	tasks   map[string]bool
	methods map[string]bool // classes and "class.method"
	onLost  func(error)
	// onOutput receives the worker's output lines.
	onOutput func(Output)

	nextID    atomic.Uint64
	nextActor atomic.Uint64

	pmu     sync.Mutex
	pending pendingTable // by value: no allocation per call
	watches []*taskWatch // free watches, for reuse (StartTask)
	lost    error        // set once the reader has ended
	closed  atomic.Bool
	inLost  atomic.Bool // OnLost is running
	// delivering is set while the reader hands a started task its
	// result (TaskDone): the tasks that starts are sent held (sendHeld),
	// for the reader to write together once it has handled what it read.
	// A task another goroutine starts meanwhile is held too, and written
	// as soon as the reader is done with its burst.
	delivering atomic.Bool
	// flushers are what the reader calls once it has delivered the
	// results it read (the backends whose TaskDoneHeld it called),
	// before it reads again (backend.TaskDoneHolder). The reader's.
	flushers []backend.Flusher
	readEnd  chan struct{}
}

type pendingCall struct {
	ch   chan reply
	typ  msgType
	name string
	// done, if set, receives the reply instead of ch (StartTask); stop,
	// or watcher's watch number watch, ends the watch of the call's
	// context.
	done  backend.TaskDone
	stop  func() bool
	tw    *taskWatch
	watch uint64
}

// taskWatch is what the watch of a started task's context (an
// idWatcher's) runs when the context is cancelled. The client reuses it
// for later tasks once the watch is stopped before it ran, and its
// function value is made once: a task's watch then allocates nothing.
type taskWatch struct {
	c   *Client
	ctx context.Context
	w   idWatcher
	id  uint64
	fn  func() // w.fire
}

func (w *taskWatch) fire() { w.c.cancelStarted(w.ctx, w.id) }

// maxFreeWatches bounds the watches a client keeps for reuse.
const maxFreeWatches = 1024

// newWatchLocked returns a free watch, or a new one, with pmu held.
func (c *Client) newWatchLocked() *taskWatch {
	if n := len(c.watches); n > 0 {
		w := c.watches[n-1]
		c.watches[n-1] = nil
		c.watches = c.watches[:n-1]
		return w
	}
	w := &taskWatch{c: c}
	w.fn = w.fire
	return w
}

// unwatchLocked ends the watch of p, a started task's, with pmu held,
// and keeps its taskWatch for reuse if the watch had not run.
func (c *Client) unwatchLocked(p *pendingCall) {
	if p.done == nil {
		return
	}
	stopped := p.unwatch()
	if w := p.tw; w != nil && stopped && len(c.watches) < maxFreeWatches {
		w.ctx, w.w = nil, nil
		c.watches = append(c.watches, w)
	}
	p.tw, p.watch, p.stop = nil, 0, nil
}

// deliver hands r to the call's waiter.
func (p pendingCall) deliver(r reply) {
	if p.done == nil {
		p.ch <- r
		return
	}
	p.unwatch()
	p.done.TaskDone(r.v, r.err)
}

// unwatch ends the watch of a started task's context and reports
// whether it stopped it before it ran.
func (p pendingCall) unwatch() bool {
	switch {
	case p.watch != 0:
		return p.tw.w.StopAfterFunc(p.watch)
	case p.stop != nil:
		return p.stop()
	}
	return false
}

type reply struct {
	v   backend.Value
	err error
}

var (
	_ backend.Executor    = (*Client)(nil)
	_ backend.TaskStarter = (*Client)(nil)
)

// Dial connects to the worker at addr (host:port) and performs the
// handshake: the token, the protocol version and the manifests must
// match. ctx bounds the dial and the handshake only.
//
// Errors: Unavailable when the worker cannot be reached, FailedPrecondition
// when it refuses the token, speaks another protocol version or was built
// from different code (the message names the differences), InvalidArgument
// for bad options.
func Dial(ctx context.Context, addr string, opts *ClientOptions) (*Client, error) {
	op := "dial worker " + addr
	if opts == nil {
		opts = &ClientOptions{}
	}
	limit, err := messageLimit(op, opts.MaxMessageSize)
	if err != nil {
		return nil, err
	}
	hb := opts.Heartbeat
	if hb <= 0 {
		hb = DefaultHeartbeat
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, backend.Errorf(backend.Unavailable, op, "%w", err)
	}
	if opts.TLS != nil {
		nc = tls.Client(nc, opts.TLS)
	}
	br, hdr, err := handshake(ctx, nc, addr, opts, limit, hb)
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if tlsRefusal(err) {
			return nil, backend.Errorf(backend.FailedPrecondition, op, "TLS: %w (driver and worker need certificates of the same cluster CA, and both must use TLS)", err)
		}
		var be *backend.Error
		if errors.As(err, &be) {
			be.Op = op
			return nil, be
		}
		return nil, backend.Errorf(backend.Unavailable, op, "handshake: %w", err)
	}
	if n, err := strconv.Atoi(hdr.Get(headerMaxMessage)); err == nil && n >= MinMaxMessageSize && n < limit {
		limit = n
	}
	pid, _ := strconv.Atoi(hdr.Get(headerPID))
	c := &Client{
		conn: newConn(nc, br, limit, hb, log), addr: addr, pid: pid,
		tasks: map[string]bool{}, methods: map[string]bool{}, onLost: opts.OnLost,
		readEnd: make(chan struct{}), onOutput: opts.OnOutput,
	}
	for _, e := range opts.Manifest.Entries {
		switch e.Kind {
		case KindTask:
			c.tasks[e.Name] = true
		case KindActor, KindMethod: // methods are named "class.method"
			c.methods[e.Name] = true
		}
	}
	c.conn.idle = c.flush
	c.conn.start()
	go c.readLoop()
	return c, nil
}

// pendingAlert returns the TLS alert a worker sent before it closed the
// connection, if one is waiting to be read on nc, else err. In TLS 1.3 the
// driver's handshake completes before the worker has checked the driver's
// certificate, so a refusal (another CA) arrives while the driver writes
// its hello; the worker then closes with the hello unread, which resets the
// connection, and the write fails with "connection reset" or "broken pipe"
// although the alert is already in the driver's receive queue.
func pendingAlert(nc net.Conn, err error) error {
	tc, ok := nc.(*tls.Conn)
	if !ok || tlsRefusal(err) {
		return err
	}
	tc.SetReadDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a failed deadline shows as a failed read
	var b [1]byte
	if _, rerr := tc.Read(b[:]); tlsRefusal(rerr) {
		return rerr
	}
	return err
}

// handshake performs the HTTP upgrade on nc and returns the reader to
// continue with and the response headers.
func handshake(ctx context.Context, nc net.Conn, addr string, opts *ClientOptions, limit int, hb time.Duration) (*bufio.Reader, http.Header, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	nc.SetDeadline(deadline) //nolint:errcheck // a failed deadline shows as a failed read

	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) }) //nolint:errcheck
	defer stop()
	scheme := "http://"
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, nil, err
		}
		scheme = "https://"
	}
	body, err := json.Marshal(helloRequest{Fingerprint: opts.Manifest.Fingerprint(), Manifest: opts.Manifest, MaxMsg: limit, Heartbeat: hb.Milliseconds(), Output: opts.OnOutput != nil, Env: opts.Env})
	if err != nil {
		return nil, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, scheme+addr+connectPath, bytes.NewReader(body))
	if err != nil {
		return nil, nil, backend.Errorf(backend.InvalidArgument, "", "bad worker address: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+opts.Token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocolName)
	req.Header.Set("Content-Type", "application/json")
	if err := req.Write(nc); err != nil {
		return nil, nil, pendingAlert(nc, err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, nil, pendingAlert(nc, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, nil, refusal(resp, opts.Manifest)
	}
	if resp.Header.Get("Upgrade") != protocolName {
		return nil, nil, backend.Errorf(backend.FailedPrecondition, "", "the worker switched to protocol %q, not %q", resp.Header.Get("Upgrade"), protocolName)
	}
	nc.SetDeadline(time.Time{}) //nolint:errcheck
	return br, resp.Header, nil
}

// refusal turns a refused handshake into an error with the worker's
// reason. When the manifests differ the worker sends its own, and the
// difference is computed here too, in case the worker is older.
func refusal(resp *http.Response, mine Manifest) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxHelloSize))
	var he handshakeError
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &he) == nil && he.Message != "" {
		msg = he.Message
		if len(he.Manifest.Entries) > 0 {
			he.Manifest.Codec = mine.Codec
			if d := Diff(mine, he.Manifest); d != "" {
				msg = "the driver and the worker were built from different code: " + d
			}
		}
	}
	if len(msg) > 4096 {
		msg = msg[:4096] + "..."
	}
	code := backend.Unavailable
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusPreconditionFailed, http.StatusNotFound, http.StatusMethodNotAllowed:
		code = backend.FailedPrecondition
	case http.StatusRequestEntityTooLarge:
		code = backend.ResourceExhausted
	case http.StatusBadRequest:
		code = backend.InvalidArgument
		if strings.Contains(msg, "HTTPS server") { // net/http's answer to plain HTTP on a TLS port
			code = backend.FailedPrecondition
			msg += " (the worker requires TLS: set ClientOptions.TLS)"
		}
	}
	return backend.Errorf(code, "", "worker refused the connection (%s): %s", resp.Status, msg)
}

// Addr returns the worker's address.
func (c *Client) Addr() string { return c.addr }

// PID returns the worker's process ID, as it reported it.
func (c *Client) PID() int { return c.pid }

// Done is closed when the connection is closed or lost.
func (c *Client) Done() <-chan struct{} { return c.readEnd }

// Err returns why the connection ended, or nil while it is up.
func (c *Client) Err() error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.lost
}

// Close closes the connection: calls in flight fail with FailedPrecondition
// (ErrClosed), the worker cancels their work and drops the actors created
// through this client. OnLost is not called. Close waits for the client's
// goroutines and is idempotent. It may be called from OnLost: a Close
// that finds OnLost running (a lost connection, already closed) does not
// wait for OnLost to return, only for the connection's other goroutines;
// the calls in flight fail with the loss once OnLost returns.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.conn.close(backend.ErrClosed)
	c.conn.wg.Wait()
	if c.inLost.Load() {
		return nil
	}
	<-c.readEnd
	return nil
}

// addFlusher records f (may be nil) for flush.
func (c *Client) addFlusher(f backend.Flusher) {
	if f == nil {
		return
	}
	for _, g := range c.flushers {
		if g == f {
			return
		}
	}
	c.flushers = append(c.flushers, f)
}

// flush wakes the waiters of the results delivered held since the last
// flush: the reader calls it once it has handled what it read.
func (c *Client) flush() {
	for i, f := range c.flushers {
		f.Flush()
		c.flushers[i] = nil
	}
	c.flushers = c.flushers[:0]
}

func (c *Client) readLoop() {
	c.conn.readLoop(c.handle)
	c.flush()
	<-c.conn.done // the final cause is set once the connection is done
	cause := c.conn.cause
	var err error
	if c.closed.Load() {
		err = backend.Errorf(backend.FailedPrecondition, "", "connection to worker %s closed: %w", c.addr, backend.ErrClosed)
	} else {
		err = c.lostError(cause)
		c.conn.log.Warn("goray: worker connection lost", "worker", c.addr, "pid", c.pid, "cause", cause)
		if c.onLost != nil {
			c.inLost.Store(true)
			c.onLost(err)
			c.inLost.Store(false)
		}
	}
	c.pmu.Lock()
	c.lost = err
	pend := c.pending.takeAll()
	c.pmu.Unlock()
	for _, p := range pend {
		p.deliver(reply{err: c.callError(p.typ, p.name, err)})
	}
	close(c.readEnd)
}

// lostError is the error of calls on a lost connection.
func (c *Client) lostError(cause error) error {
	var re *remoteError
	if errors.As(cause, &re) {
		code := backend.CodeOf(re.err)
		if code == backend.Unknown {
			code = backend.Unavailable
		}
		return backend.Errorf(code, "", "worker %s (pid %d) dropped the connection: %v", c.addr, c.pid, re.err)
	}
	return backend.Errorf(backend.Unavailable, "", "worker %s (pid %d) lost: %v", c.addr, c.pid, cause)
}

func (c *Client) callError(typ msgType, name string, err error) error {
	op := "run task " + name
	switch typ {
	case msgNewActor:
		op = "create actor " + name
	case msgCall:
		op = "call " + name
	}
	if be, ok := err.(*backend.Error); ok {
		return &backend.Error{Code: be.Code, Op: op, Err: be.Err}
	}
	return backend.Wrap(backend.Unavailable, op, err)
}

func (c *Client) handle(m *message) error {
	switch m.typ {
	case msgResult, msgError:
		c.pmu.Lock()
		p, ok := c.pending.take(m.id)
		if ok {
			c.unwatchLocked(&p)
		}
		c.pmu.Unlock()
		if ok {
			if p.done == nil {
				p.deliver(reply{v: m.value, err: m.err})
				return nil
			}
			c.delivering.Store(true)
			if h, ok := p.done.(backend.TaskDoneHolder); ok {
				c.addFlusher(h.TaskDoneHeld(m.value, m.err))
			} else {
				p.deliver(reply{v: m.value, err: m.err})
			}
			c.delivering.Store(false)
		}
		return nil
	case msgOutput:
		if c.onOutput != nil {
			c.onOutput(Output{Stream: int(m.id), Source: m.name, Node: m.node, Line: m.value.Data, PID: c.pid})
		}
		return nil
	}
	return fmt.Errorf("a driver does not accept %v messages", m.typ)
}

// call sends a request and waits for its reply or ctx's end.
// what names the work for errors ("class.method" for calls).
func (c *Client) call(ctx context.Context, m *message, what string) (backend.Value, error) {
	if err := ctx.Err(); err != nil {
		return backend.Value{}, err
	}
	m.id = c.nextID.Add(1)
	p := pendingCall{ch: make(chan reply, 1), typ: m.typ, name: what}
	c.pmu.Lock()
	if c.lost != nil {
		err := c.lost
		c.pmu.Unlock()
		return backend.Value{}, c.callError(m.typ, what, err)
	}
	c.pending.put(m.id, p)
	lone := c.pending.len() == 1
	c.pmu.Unlock()
	if err := c.conn.send(m, false, lone); err != nil {
		c.pmu.Lock()
		_, mine := c.pending.take(m.id)
		c.pmu.Unlock()
		if !mine {
			// The reader has failed the call with the connection's error.
			r := <-p.ch
			return r.v, r.err
		}
		var closed *errConnClosed
		if errors.As(err, &closed) {
			<-c.readEnd // OnLost has run
			return backend.Value{}, c.callError(m.typ, p.name, c.Err())
		}
		return backend.Value{}, c.callError(m.typ, p.name, err)
	}
	select {
	case r := <-p.ch:
		return r.v, r.err
	case <-ctx.Done():
		c.pmu.Lock()
		_, mine := c.pending.take(m.id)
		c.pmu.Unlock()
		if mine {
			typ := msgCancel
			if m.typ == msgRunTask && backend.CancelForced(ctx) {
				typ = msgKill // the worker process ends
			}
			c.conn.send(&message{typ: typ, id: m.id}, true, false) //nolint:errcheck // a lost connection cancels everything
		}
		return backend.Value{}, ctx.Err()
	}
}

// afterFuncer is a context that runs a function when it is cancelled
// without a goroutine per watch (the backend's task contexts).
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// idWatcher is an afterFuncer whose watch is stopped by number, which
// spares allocating a stop function per task (backend/cluster's task
// contexts): AfterFuncID returns the number, or 0 and a stop function.
type idWatcher interface {
	AfterFuncID(f func()) (id uint64, stop func() bool)
	StopAfterFunc(id uint64) bool
}

// StartTask implements backend.TaskStarter: it sends the task to the
// worker and returns; done receives the result from the connection's
// reader goroutine. No goroutine waits per task in flight, and the sends
// of many tasks go out in few writes.
// It always returns true: a failure to send is reported through done.
func (c *Client) StartTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo, done backend.TaskDone) bool {
	if err := ctx.Err(); err != nil {
		go done.TaskDone(backend.Value{}, err)
		return true
	}
	m := message{typ: msgRunTask, name: name, info: info, value: arg, id: c.nextID.Add(1)}
	p := pendingCall{typ: m.typ, name: name, done: done}
	c.pmu.Lock()
	if c.lost != nil {
		err := c.lost
		c.pmu.Unlock()
		go done.TaskDone(backend.Value{}, c.callError(m.typ, name, err))
		return true
	}
	// The watch is set under pmu, before the call is recorded and sent,
	// so that the reply (which takes pmu to find the call) sees p.stop,
	// and a watch that fires at once waits for pmu and finds the call.
	id := m.id
	if iw, ok := ctx.(idWatcher); ok {
		w := c.newWatchLocked()
		w.ctx, w.w, w.id = ctx, iw, id
		p.tw = w
		p.watch, p.stop = iw.AfterFuncID(w.fn)
	} else if af, ok := ctx.(afterFuncer); ok {
		p.stop = af.AfterFunc(func() { c.cancelStarted(ctx, id) })
	} else if ctx.Done() != nil {
		p.stop = context.AfterFunc(ctx, func() { c.cancelStarted(ctx, id) })
	}
	c.pending.put(m.id, p)
	how := sendQueued
	switch {
	case c.delivering.Load():
		how = sendHeld
	case c.pending.len() == 1:
		how = sendLone
	}
	c.pmu.Unlock()
	if err := c.conn.enqueue(&m, false, how); err != nil {
		c.pmu.Lock()
		_, mine := c.pending.take(m.id)
		c.pmu.Unlock()
		if !mine {
			return true // the reader or the cancellation delivered it
		}
		p.unwatch()
		var closed *errConnClosed
		if errors.As(err, &closed) {
			go func() {
				<-c.readEnd // OnLost has run
				done.TaskDone(backend.Value{}, c.callError(msgRunTask, name, c.Err()))
			}()
			return true
		}
		go done.TaskDone(backend.Value{}, c.callError(msgRunTask, name, err))
	}
	return true
}

// cancelStarted cancels a call of StartTask whose context ended: the
// worker cancels the work (or, cancelled with Force, ends) and the call
// finishes with the context's error at once.
func (c *Client) cancelStarted(ctx context.Context, id uint64) {
	c.pmu.Lock()
	p, mine := c.pending.take(id)
	c.pmu.Unlock()
	if !mine {
		return
	}
	typ := msgCancel
	if backend.CancelForced(ctx) {
		typ = msgKill // the worker process ends
	}
	c.conn.send(&message{typ: typ, id: id}, true, false) //nolint:errcheck // a lost connection cancels everything
	p.done.TaskDone(backend.Value{}, ctx.Err())
}

// HasTask implements backend.Executor from the manifest.
func (c *Client) HasTask(name string) bool { return c.tasks[name] }

// HasActorMethod implements backend.Executor from the manifest.
func (c *Client) HasActorMethod(class, method string) bool {
	if method == "" {
		return c.methods[class]
	}
	return c.methods[class] && c.methods[class+"."+method]
}

// RunTask implements backend.Executor: it runs the task in the worker.
func (c *Client) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return c.call(ctx, &message{typ: msgRunTask, name: name, info: info, value: arg}, name)
}

// NewActor implements backend.Executor: it constructs the actor in the
// worker. The actor lives there until ctx ends (a backend passes the
// actor's lifetime context), the client closes or the connection is lost.
func (c *Client) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	key := c.nextActor.Add(1)
	if _, err := c.call(ctx, &message{typ: msgNewActor, actor: key, name: class, info: info, value: arg}, class); err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() {
		c.conn.send(&message{typ: msgDropActor, actor: key}, true, false) //nolint:errcheck // a lost connection drops every actor
	})
	return &remoteActor{c: c, key: key, class: class}, nil
}

// remoteActor is an actor living in a worker.
type remoteActor struct {
	c     *Client
	key   uint64
	class string
}

func (a *remoteActor) Call(ctx context.Context, method string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return a.c.call(ctx, &message{typ: msgCall, actor: a.key, name: method, info: info, value: arg}, a.class+"."+method)
}
