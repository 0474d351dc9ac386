package serve

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/internal/rawio"
)

// Serve's connections are served by a fastServer while their requests are
// plain HTTP/1.1 ones, and by net/http's server from the first request
// that is not.
//
// net/http's server spends, per request, more than the rest of a proxy
// between a client and a replica's server: it starts a goroutine to read
// ahead once the body is read (so that a client going away cancels the
// request), sets and clears read deadlines several times, and hands data
// between that goroutine and the handler's. A fastServer reads a request
// whose head and body are in its buffer, calls the same handler with an
// *http.Request as net/http would make it, and writes the response in one
// write; one goroutine per connection, no deadline changes on the common
// path, and a goroutine that watches for the client going away only for a
// request whose handler is still running after watchAfter.
//
// What it parses is a strict subset of HTTP/1.1 (see parseFastHead): a
// request line "METHOD /target HTTP/1.1" with a common method, header
// lines "Name: value" of token names and plain values ending in CRLF, one
// valid Host, at most one Content-Length, and no Transfer-Encoding,
// Expect, Upgrade, Pragma or Connection option other than close and
// keep-alive. Anything else (HTTP/1.0, chunked bodies, 100-continue, a
// head too large for the buffer, a body that does not arrive within
// bodyGrace, TLS, a bare LF, obs-fold, ...) goes, with the bytes already
// read and all that follows on that connection, to net/http's server,
// which answers it as it always has: the subset only has to agree with
// net/http on what it takes (the tests check it against http.ReadRequest).

const (
	// fastBufSize is a connection's first read buffer; it grows, up to
	// fastBufMax, for a request that needs more.
	fastBufSize = 4 << 10
	fastBufMax  = 64 << 10
	// fastKeep bounds the buffers a connection keeps between requests: a
	// larger one, grown for a large request or response, is let go, so
	// that idle connections hold little memory.
	fastKeep = 8 << 10
	// fastOutMax is how much of a response is buffered before it is sent
	// (a response that ends within it is sent with its Content-Length, in
	// one write with its head).
	fastOutMax = 32 << 10
	// watchAfter is how long a handler runs before its client's connection
	// is watched for the client going away (which cancels the request's
	// context, as net/http does); the watchdog looks every watchAfter, so
	// a client's going away is noticed within about 2*watchAfter plus the
	// time the kernel takes to tell.
	watchAfter = 20 * time.Millisecond
	// bodyGraceMax bounds how long a request's body is waited for after
	// its head before the connection goes to net/http (which then applies
	// the handler's body timeout).
	bodyGraceMax = 100 * time.Millisecond
	// lingerClose bounds how long a connection closed after a response
	// reads what its client still sends, so that the kernel does not reset
	// the connection before the client reads the response (net/http waits
	// as long).
	lingerClose = 500 * time.Millisecond
)

// fastServer serves the connections one listener accepts.
type fastServer struct {
	handler  http.Handler
	fallback *http.Server // serves the connections handed to it through hand
	hand     *handoffListener
	// headerTimeout and idleTimeout are the http.Server's ReadHeaderTimeout
	// and IdleTimeout; bodyGrace how long a body is waited for (see
	// bodyGraceMax).
	headerTimeout, idleTimeout, bodyGrace time.Duration
	baseCtx                               context.Context
	wrap                                  func(net.Conn) net.Conn // for a connection handed to fallback

	mu      sync.Mutex
	conns   map[*fastConn]struct{}
	closing atomic.Bool
	wg      sync.WaitGroup // the connections' goroutines

	inHandler atomic.Int64 // requests in handlers
	watchdog  atomic.Bool  // the watchdog runs

	date atomic.Pointer[dateLine]

	// counted for tests
	fastRequests, handoffs, watches, peeks atomic.Int64
}

// newFastServer returns a fastServer for l whose fallback is srv (which
// must not yet serve its handoff listener).
func newFastServer(l net.Listener, srv *http.Server, wrap func(net.Conn) net.Conn) *fastServer {
	fs := &fastServer{
		handler:       srv.Handler,
		fallback:      srv,
		hand:          &handoffListener{l: l, conns: make(chan net.Conn), done: make(chan struct{})},
		headerTimeout: srv.ReadHeaderTimeout,
		idleTimeout:   srv.IdleTimeout,
		bodyGrace:     bodyGraceMax,
		wrap:          wrap,
		conns:         map[*fastConn]struct{}{},
	}
	if fs.idleTimeout <= 0 {
		fs.idleTimeout = fs.headerTimeout
	}
	ctx := context.WithValue(context.Background(), http.ServerContextKey, srv)
	fs.baseCtx = context.WithValue(ctx, http.LocalAddrContextKey, l.Addr())
	return fs
}

// serve accepts connections until the listener is closed (by shutdown, or
// by net/http's server closing the handoff listener in its own Shutdown).
// It returns http.ErrServerClosed after that, or the listener's error.
func (fs *fastServer) serve() error {
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = fs.fallback.Serve(fs.hand)
	}()
	defer func() {
		fs.hand.Close()
		<-served
	}()
	var backoff time.Duration
	for {
		c, err := fs.hand.l.Accept()
		if err != nil {
			if fs.hand.closed() || fs.closing.Load() {
				return http.ErrServerClosed
			}
			//lint:ignore SA1019 EMFILE and the like: retried after a pause, as net/http's Serve does
			if ne, ok := err.(net.Error); ok && ne.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				fs.logf("http: Accept error: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if _, isTLS := c.(*tls.Conn); isTLS {
			if !fs.hand.give(c) { // net/http needs to see the *tls.Conn itself
				c.Close()
			}
			continue
		}
		fc := &fastConn{fs: fs, c: rawio.Wrap(c), buf: make([]byte, fastBufSize)}
		if !fs.track(fc) {
			c.Close()
			continue
		}
		go fc.serve()
	}
}

// track adds fc to the connections, false when the server is closing.
func (fs *fastServer) track(fc *fastConn) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closing.Load() {
		return false
	}
	fs.conns[fc] = struct{}{}
	fs.wg.Add(1)
	return true
}

func (fs *fastServer) forget(fc *fastConn) {
	fs.mu.Lock()
	delete(fs.conns, fc)
	fs.mu.Unlock()
	fs.wg.Done()
}

// shutdown stops accepting, closes the idle connections, and lets the
// others finish their request (answered with Connection: close) and
// close; when ctx ends first it closes them at once. It returns once every
// connection's goroutine has ended.
func (fs *fastServer) shutdown(ctx context.Context) error {
	fs.closing.Store(true)
	fs.hand.Close()
	done := make(chan struct{})
	go func() { fs.wg.Wait(); close(done) }()
	wait := time.Millisecond
	for {
		fs.closeIdle()
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			fs.close() // a handler that ignores its context may run on
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// close closes every connection at once, cancelling the requests in
// handlers (it does not wait for them to return, as http.Server's Close
// does not).
func (fs *fastServer) close() {
	fs.closing.Store(true)
	fs.hand.Close()
	fs.mu.Lock()
	for fc := range fs.conns {
		fc.kill()
	}
	fs.mu.Unlock()
}

func (fs *fastServer) closeIdle() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for fc := range fs.conns {
		if fc.state.CompareAndSwap(connIdle, connClosed) {
			fc.c.Close()
		}
	}
}

func (fs *fastServer) logf(format string, args ...any) {
	if fs.fallback.ErrorLog != nil {
		fs.fallback.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// handlerStarted counts a request into its handler, starting the watchdog
// when it is not running.
func (fs *fastServer) handlerStarted() {
	fs.inHandler.Add(1)
	if !fs.watchdog.Load() && fs.watchdog.CompareAndSwap(false, true) {
		go fs.watch()
	}
}

// watch starts, every watchAfter, the watch of the connections whose
// handler has run longer than that (see fastConn.watchClient), and ends
// when no request is in a handler.
func (fs *fastServer) watch() {
	t := time.NewTicker(watchAfter)
	defer t.Stop()
	for range t.C {
		if fs.inHandler.Load() == 0 {
			fs.watchdog.Store(false)
			// a request that started after the load and saw the watchdog
			// running would be left unwatched: take it back if so.
			if fs.inHandler.Load() == 0 || !fs.watchdog.CompareAndSwap(false, true) {
				return
			}
		}
		before := time.Now().Add(-watchAfter).UnixNano()
		fs.mu.Lock()
		for fc := range fs.conns {
			if s := fc.handlerSince.Load(); s != 0 && s <= before {
				fc.startWatch()
			}
		}
		fs.mu.Unlock()
	}
}

// dateLine is a response's Date header line, made once a second.
type dateLine struct {
	sec  int64
	line []byte
}

func (fs *fastServer) dateLine(now time.Time) []byte {
	sec := now.Unix()
	if d := fs.date.Load(); d != nil && d.sec == sec {
		return d.line
	}
	line := append([]byte("Date: "), now.UTC().AppendFormat(nil, http.TimeFormat)...)
	line = append(line, '\r', '\n')
	fs.date.Store(&dateLine{sec: sec, line: line})
	return line
}

// handoffListener gives net/http's server the connections a fastServer
// hands over. Closing it closes the listener the fastServer accepts on.
type handoffListener struct {
	l     net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoffListener) Close() error {
	var err error
	h.once.Do(func() {
		close(h.done)
		err = h.l.Close()
	})
	return err
}

func (h *handoffListener) Addr() net.Addr { return h.l.Addr() }

func (h *handoffListener) closed() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// give hands c to net/http's server; false when the listener is closed.
func (h *handoffListener) give(c net.Conn) bool {
	select {
	case h.conns <- c:
		return true
	case <-h.done:
		return false
	}
}

// replayConn reads buf before the connection's next bytes.
type replayConn struct {
	net.Conn
	buf []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// A fastConn's states.
const (
	connIdle    = iota // waiting for a request, nothing of it read
	connActive         // reading a request, or writing its response
	connBusy           // in the request's handler
	connWatched        // in the handler, with the client's connection watched
	connClosed         // closed by shutdown
)

// fastConn is one connection of a fastServer.
type fastConn struct {
	fs    *fastServer
	c     net.Conn
	state atomic.Int32
	// handlerSince is when the running handler started (UnixNano), 0 out
	// of a handler.
	handlerSince atomic.Int64

	buf  []byte // read buffer: buf[r:w] is read and not yet used
	r, w int
	// deadline is the read deadline last set on c (zero: none).
	deadline time.Time
	remote   string

	// the request in its handler
	mu        sync.Mutex // guards cancel against kill
	cancel    context.CancelFunc
	killed    bool
	watchDone chan struct{}
	watchMu   sync.Mutex // orders the watch's start against its stop
	stopWatch bool
	peek      [1]byte
	peeked    bool
	gone      bool // the watch saw the client go

	out  []byte // the response's bytes not yet written
	body []byte // the response's body, before its head is made
	keys []string
	head []byte
}

// kill closes the connection now and cancels its request.
func (fc *fastConn) kill() {
	fc.mu.Lock()
	fc.killed = true
	if fc.cancel != nil {
		fc.cancel()
	}
	fc.mu.Unlock()
	fc.c.Close()
}

func (fc *fastConn) serve() {
	defer fc.fs.forget(fc)
	fc.remote = fc.c.RemoteAddr().String()
	for {
		if fc.r == fc.w {
			if len(fc.buf) > fastBufSize {
				fc.buf, fc.r, fc.w = make([]byte, fastBufSize), 0, 0
			}
			if !fc.state.CompareAndSwap(connActive, connIdle) && fc.state.Load() != connIdle {
				fc.c.Close() // closed by shutdown
				return
			}
			if fc.fs.closing.Load() {
				if fc.state.CompareAndSwap(connIdle, connClosed) {
					fc.c.Close()
				}
				return
			}
		}
		head, ok := fc.readRequest()
		if !ok {
			return
		}
		fc.fs.fastRequests.Add(1)
		if !fc.serveRequest(head) {
			return
		}
	}
}

// readRequest waits for a request whose head and body are in the buffer
// and parses it. It returns false when the connection was closed or
// handed to net/http's server.
func (fc *fastConn) readRequest() (fastHead, bool) {
	var headStart time.Time
	var bodyStart time.Time
	for {
		if fc.r < fc.w {
			if !fc.state.CompareAndSwap(connIdle, connActive) && fc.state.Load() != connActive {
				fc.c.Close()
				return fastHead{}, false
			}
			end, bad := headEnd(fc.buf[fc.r:fc.w])
			if bad {
				return fastHead{}, fc.handOff()
			}
			if end > 0 {
				h, ok := parseFastHead(fc.buf[fc.r : fc.r+end])
				if !ok || h.contentLength > fastBufMax-int64(end) {
					return fastHead{}, fc.handOff()
				}
				need := end + int(h.contentLength)
				if fc.w-fc.r >= need {
					h.body = fc.buf[fc.r+end : fc.r+need]
					fc.r += need
					if fc.r == fc.w {
						fc.r, fc.w = 0, 0
					}
					return h, true
				}
				// The body is still on its way: wait a little for it.
				if bodyStart.IsZero() {
					bodyStart = time.Now()
				} else if time.Since(bodyStart) >= fc.fs.bodyGrace {
					return fastHead{}, fc.handOff()
				}
				fc.setDeadline(bodyStart.Add(fc.fs.bodyGrace), 0)
				if !fc.room(need) {
					return fastHead{}, fc.handOff()
				}
			} else {
				if fc.w-fc.r >= fastBufMax {
					return fastHead{}, fc.handOff()
				}
				if headStart.IsZero() {
					headStart = time.Now()
				}
				if fc.fs.headerTimeout > 0 {
					fc.setDeadline(headStart.Add(fc.fs.headerTimeout), 0)
				} else {
					fc.clearDeadline() // a body's wait may have left one
				}
				fc.room(fc.w - fc.r + 1)
			}
		} else if fc.fs.idleTimeout > 0 {
			fc.setDeadline(time.Time{}, fc.fs.idleTimeout)
		} else {
			fc.clearDeadline()
		}
		n, err := fc.c.Read(fc.buf[fc.w:])
		fc.w += n
		if err != nil && n == 0 {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && !bodyStart.IsZero() && fc.state.Load() == connActive {
				return fastHead{}, fc.handOff() // a slow body: net/http's server takes it
			}
			fc.c.Close()
			return fastHead{}, false
		}
	}
}

// room makes room in the buffer for n bytes from fc.r on, moving or
// growing it; false when n is more than fastBufMax.
func (fc *fastConn) room(n int) bool {
	if n > fastBufMax {
		return false
	}
	if fc.r+n <= len(fc.buf) && fc.w < len(fc.buf) {
		return true
	}
	if n <= len(fc.buf) {
		copy(fc.buf, fc.buf[fc.r:fc.w])
	} else {
		nb := make([]byte, min(max(2*len(fc.buf), n), fastBufMax))
		copy(nb, fc.buf[fc.r:fc.w])
		fc.buf = nb
	}
	fc.w -= fc.r
	fc.r = 0
	return true
}

// setDeadline sets c's read deadline to at, or, when at is zero, to about
// idle from now: the deadline set last is kept while it is at least
// 15/16 of idle away, so that a busy connection does not move the
// runtime's timer on every request.
func (fc *fastConn) setDeadline(at time.Time, idle time.Duration) {
	if at.IsZero() {
		now := time.Now()
		if !fc.deadline.IsZero() && fc.deadline.Sub(now) >= idle-idle/16 && fc.deadline.Sub(now) <= idle {
			return
		}
		at = now.Add(idle)
	} else if at.Equal(fc.deadline) {
		return
	}
	fc.deadline = at
	_ = fc.c.SetReadDeadline(at)
}

// clearDeadline clears c's read deadline, when one is set.
func (fc *fastConn) clearDeadline() {
	if !fc.deadline.IsZero() {
		fc.deadline = time.Time{}
		_ = fc.c.SetReadDeadline(time.Time{})
	}
}

// handOff gives the connection, with what was read of it, to net/http's
// server. It returns false (the fastConn is done with it).
func (fc *fastConn) handOff() bool {
	fc.fs.handoffs.Add(1)
	if !fc.state.CompareAndSwap(connActive, connClosed) {
		fc.c.Close()
		return false
	}
	_ = fc.c.SetReadDeadline(time.Time{})
	var c net.Conn = fc.c
	if fc.r < fc.w {
		c = &replayConn{Conn: fc.c, buf: bytes.Clone(fc.buf[fc.r:fc.w])}
	}
	if fc.fs.wrap != nil {
		c = fc.fs.wrap(c)
	}
	if !fc.fs.hand.give(c) {
		fc.c.Close()
	}
	return false
}

// headEnd returns the length of the request head at the start of p
// through its CRLF CRLF, 0 when p does not hold all of it yet; bad when p
// has a bare LF before that (net/http's server takes such a request).
func headEnd(p []byte) (end int, bad bool) {
	from := 0
	for {
		i := bytes.IndexByte(p[from:], '\n')
		if i < 0 {
			return 0, false
		}
		i += from
		if i == 0 || p[i-1] != '\r' {
			return 0, true
		}
		if i >= 3 && p[i-2] == '\n' && p[i-3] == '\r' {
			return i + 1, false
		}
		from = i + 1
	}
}

// fastHead is a request head parseFastHead took, and its body.
type fastHead struct {
	method, target, host string
	url                  *url.URL
	header               http.Header
	contentLength        int64
	close                bool
	body                 []byte
}

// fastMethods are the methods a fastServer serves; HEAD (a response
// without its body), CONNECT and others go to net/http's server.
var fastMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// parseFastHead parses a request head (through its CRLF CRLF) when it is
// in the subset a fastServer serves (see the comment at the top of this
// file), with what net/http's server would make of it: the Host header
// moved to host, the URL from url.ParseRequestURI, header names in
// canonical form, values without the whitespace around them. It checks
// the bytes with the response parser's helpers (resphead.go) and takes
// the strings from one conversion of the head.
func parseFastHead(p []byte) (fastHead, bool) {
	var h fastHead
	line, block, ok := cutLine(p)
	if !ok {
		return h, false
	}
	block = block[:len(block)-2] // the header lines, each with its CRLF
	s := string(p[:len(p)-2])    // the parts share it
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return h, false
	}
	for _, m := range fastMethods {
		if string(line[:sp]) == m {
			h.method = m
			break
		}
	}
	if h.method == "" {
		return h, false
	}
	target, proto, ok := strings.Cut(s[sp+1:len(line)], " ")
	if !ok || proto != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return h, false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return h, false
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return h, false
	}
	h.target, h.url = target, u
	lines := bytes.Count(block, []byte{'\n'})
	if lines > 100 {
		return h, false
	}
	h.header = make(http.Header, lines)
	values := make([]string, lines)
	hosts, lengths := 0, 0
	for len(block) > 0 {
		off := len(p) - 2 - len(block) // of this line, in p and s
		line, block, ok = cutLine(block)
		if !ok || len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			return h, false // a CR in the line, obs-fold, an empty line
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validName(line[:colon]) {
			return h, false
		}
		after := line[colon+1:]
		v := trimOWS(after)
		if !validValue(v) {
			return h, false
		}
		start := off + colon + 1 + len(after) - len(trimLeftOWS(after))
		value := s[start : start+len(v)]
		key := textproto.CanonicalMIMEHeaderKey(s[off : off+colon])
		switch key {
		case "Host":
			hosts++
			if hosts > 1 || !validFastHost(value) {
				return h, false
			}
			h.host = value
			continue // net/http's server moves it to Request.Host
		case "Content-Length":
			lengths++
			if h.contentLength = parseLength(v); lengths > 1 || h.contentLength < 0 {
				return h, false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Pragma", "Trailer":
			return h, false
		case "Connection":
			c, ok := connectionOptions(v)
			if !ok {
				return h, false
			}
			h.close = h.close || c
		}
		values[0] = value
		if vs, ok := h.header[key]; ok {
			h.header[key] = append(vs, value)
		} else {
			h.header[key] = values[:1:1]
		}
		values = values[1:]
	}
	if hosts != 1 {
		return h, false
	}
	return h, true
}

// isTokenByte reports whether c is an RFC 9110 tchar.
func isTokenByte(c byte) bool { return c < 0x80 && tokenChar[c] }

// validFastHost accepts a plain host[:port]: letters, digits and "-._:[]".
func validFastHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return true
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// serveRequest runs the handler for h and writes its response. It
// returns false when the connection is done (closed).
func (fc *fastConn) serveRequest(h fastHead) (keep bool) {
	fs := fc.fs
	body := &fastBody{b: h.body}
	var rb io.ReadCloser = http.NoBody
	if h.contentLength > 0 {
		rb = body
	}
	ctx, cancel := context.WithCancel(fs.baseCtx)
	fc.mu.Lock()
	if fc.killed {
		fc.mu.Unlock()
		cancel()
		return false
	}
	fc.cancel = cancel
	fc.mu.Unlock()
	req := (&http.Request{
		Method: h.method, URL: h.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h.header, Body: rb, ContentLength: h.contentLength, Host: h.host,
		Close: h.close, RemoteAddr: fc.remote, RequestURI: h.target,
	}).WithContext(ctx)
	w := &fastWriter{fc: fc, req: req, header: make(http.Header), contentLength: -1, closeAfter: h.close}
	fc.out, fc.body = fc.out[:0], fc.body[:0]

	fc.state.Store(connBusy)
	fc.handlerSince.Store(time.Now().UnixNano())
	fs.handlerStarted()
	panicked := fc.runHandler(w, req)
	body.close() // before the buffer it is in changes
	fc.handlerSince.Store(0)
	fs.inHandler.Add(-1)
	if !fc.state.CompareAndSwap(connBusy, connActive) {
		fc.endWatch() // the watchdog started a watch
		fc.state.Store(connActive)
	}
	fc.mu.Lock()
	fc.cancel = nil
	killed := fc.killed
	fc.mu.Unlock()
	if panicked || killed {
		cancel()
		fc.c.Close()
		return false
	}
	if fs.closing.Load() || fc.gone {
		w.closeAfter = true
	}
	w.finish()
	cancel()
	if w.err != nil {
		fc.c.Close()
		return false
	}
	if w.closeAfter {
		fc.lingerAndClose()
		return false
	}
	if cap(fc.out) > fastKeep {
		fc.out = nil
	}
	if cap(fc.body) > fastKeep {
		fc.body = nil
	}
	return true
}

// runHandler calls the handler; true when it panicked (logged, unless
// with http.ErrAbortHandler, as net/http logs it).
func (fc *fastConn) runHandler(w *fastWriter, r *http.Request) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				fc.fs.logf("http: panic serving %v: %v\n%s", fc.remote, p, buf)
			}
		}
	}()
	fc.fs.handler.ServeHTTP(w, r)
	w.handlerDone = true
	return false
}

// startWatch starts watchClient when fc is still in its handler.
func (fc *fastConn) startWatch() {
	fc.watchMu.Lock()
	defer fc.watchMu.Unlock()
	if fc.state.CompareAndSwap(connBusy, connWatched) {
		fc.fs.watches.Add(1)
		fc.watchDone = make(chan struct{})
		go fc.watchClient()
	}
}

// watchClient reads from the client's connection while the handler runs:
// an end of the connection (or an error) cancels the request's context,
// as net/http's server's read ahead does; a byte (the start of the next
// request) is kept for the next read.
func (fc *fastConn) watchClient() {
	defer close(fc.watchDone)
	fc.watchMu.Lock()
	if fc.stopWatch {
		fc.watchMu.Unlock()
		return
	}
	_ = fc.c.SetReadDeadline(time.Time{})
	fc.watchMu.Unlock()
	n, err := fc.c.Read(fc.peek[:])
	if n > 0 {
		fc.peeked = true
		fc.fs.peeks.Add(1)
		return
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return // stopped by endWatch
	}
	fc.gone = true
	fc.mu.Lock()
	if fc.cancel != nil {
		fc.cancel()
	}
	fc.mu.Unlock()
}

// endWatch stops watchClient and waits for it.
func (fc *fastConn) endWatch() {
	fc.watchMu.Lock()
	fc.stopWatch = true
	_ = fc.c.SetReadDeadline(aLongTimeAgo)
	done := fc.watchDone
	fc.watchMu.Unlock()
	<-done
	fc.watchMu.Lock()
	fc.stopWatch, fc.watchDone = false, nil
	fc.watchMu.Unlock()
	_ = fc.c.SetReadDeadline(time.Time{})
	fc.deadline = time.Time{} // set again before the next read
	if fc.peeked {
		fc.peeked = false
		fc.room(fc.w - fc.r + 1)
		fc.buf[fc.w] = fc.peek[0]
		fc.w++
	}
}

// lingerAndClose closes the connection after a response that said
// Connection: close: it shuts the write side, reads what the client still
// sends for a while (so that the kernel does not reset the connection
// before the client has read the response), then closes.
func (fc *fastConn) lingerAndClose() {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := fc.c.(closeWriter); ok {
		_ = cw.CloseWrite()
		_ = fc.c.SetReadDeadline(time.Now().Add(lingerClose))
		var buf [512]byte
		for {
			if _, err := fc.c.Read(buf[:]); err != nil {
				break
			}
		}
	}
	fc.c.Close()
}

// fastBody is a request's body, in the connection's buffer until the
// handler returns.
type fastBody struct {
	mu   sync.Mutex
	b    []byte
	done bool
}

func (b *fastBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

func (b *fastBody) Close() error {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
	return nil
}

// close ends the body when its handler returns: the buffer it is in is
// the connection's.
func (b *fastBody) close() {
	b.mu.Lock()
	b.done, b.b = true, nil
	b.mu.Unlock()
}

// fastWriter is the http.ResponseWriter of a request a fastServer serves.
// It makes the response as net/http's server would: the status line, the
// handler's header as it was at WriteHeader (sorted, names that are not
// tokens left out, line breaks in values made spaces), then Content-Length
// for a response that ended within fastOutMax and had none (chunked
// otherwise), Content-Type sniffed from the body when the handler set none
// (nor Content-Encoding), Date unless the handler set one, and Connection:
// close when the connection closes after it. 1xx responses other than 101
// are written at once. Trailers are not supported: the ingress forwards
// none.
type fastWriter struct {
	fc     *fastConn
	req    *http.Request
	header http.Header

	status        int
	wroteHeader   bool
	headerSent    bool
	handlerDone   bool
	finished      bool
	chunking      bool
	contentLength int64 // the handler's, or -1
	written       int64
	closeAfter    bool
	err           error // writing to the connection failed

	// at WriteHeader: the head's lines from the handler's header
	head                   []byte
	haveType, hasCE, hasTE bool
	teIdentity, hasDate    bool
}

func (w *fastWriter) Header() http.Header { return w.header }

func (w *fastWriter) WriteHeader(code int) {
	if w.finished {
		w.fc.fs.logf("http: response.WriteHeader on a finished response")
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader {
		w.fc.fs.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.writeInterim(code)
		return
	}
	w.wroteHeader = true
	w.status = code
	h := w.header
	if cl := headerValue(h, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.fc.fs.logf("http: invalid Content-Length of %q", cl)
			delete(h, "Content-Length")
		}
	}
	_, w.haveType = h["Content-Type"]
	w.hasCE = headerValue(h, "Content-Encoding") != ""
	te := headerValue(h, "Transfer-Encoding")
	w.hasTE, w.teIdentity = te != "", te == "identity"
	_, w.hasDate = h["Date"]
	if headerValue(h, "Connection") == "close" { // net/http's test, exactly
		w.closeAfter = true
	}
	exclude := func(k string) bool {
		switch k {
		case "Transfer-Encoding":
			return true
		case "Content-Length":
			return w.contentLength < 0 || !bodyAllowedForStatus(code)
		case "Content-Type":
			return code == http.StatusNotModified
		}
		return false
	}
	w.head = w.fc.appendStatusAndHeader(w.fc.head[:0], code, h, exclude)
	w.fc.head = w.head
}

// writeInterim writes a 1xx response at once.
func (w *fastWriter) writeInterim(code int) {
	if w.err != nil {
		return
	}
	b := w.fc.appendStatusAndHeader(nil, code, w.header, func(k string) bool {
		return k == "Content-Length" || k == "Transfer-Encoding"
	})
	b = append(b, '\r', '\n')
	_, w.err = w.fc.c.Write(b)
}

// appendStatusAndHeader appends the status line and h's lines (sorted by
// name, without those exclude says) to b.
func (fc *fastConn) appendStatusAndHeader(b []byte, code int, h http.Header, exclude func(string) bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		b = strconv.AppendInt(b, int64(code), 10)
		b = append(b, ' ')
		b = append(b, text...)
	} else {
		b = append(b, strconv.Itoa(1000 + code)[1:]...)
		b = append(b, " status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	b = append(b, '\r', '\n')
	keys := fc.keys[:0]
	for k := range h {
		if !exclude(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !validHeaderName(k) {
			continue // net/http leaves such names out
		}
		for _, v := range h[k] {
			b = append(b, k...)
			b = append(b, ':', ' ')
			b = appendHeaderValue(b, v)
			b = append(b, '\r', '\n')
		}
	}
	clear(keys)
	fc.keys = keys[:0]
	return b
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

// appendHeaderValue appends v with CR and LF made spaces and the spaces
// and tabs around it left out, as net/http writes a header value.
func appendHeaderValue(b []byte, v string) []byte {
	start := len(b)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	t := b[start:]
	lead := 0
	for lead < len(t) && (t[lead] == ' ' || t[lead] == '\t') {
		lead++
	}
	end := len(t)
	for end > lead && (t[end-1] == ' ' || t[end-1] == '\t') {
		end--
	}
	n := copy(t, t[lead:end])
	return b[:start+n]
}

// tokenIn reports whether one of the comma-separated values has token t
// (ASCII case-insensitively).
func tokenIn(values []string, t string) bool {
	for _, v := range values {
		for v != "" {
			var opt string
			opt, v, _ = strings.Cut(v, ",")
			if asciiEqualFold(strings.Trim(opt, " \t"), t) {
				return true
			}
		}
	}
	return false
}

// bodyAllowedForStatus is net/http's rule: 1xx, 204 and 304 have no body.
func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

func (w *fastWriter) Write(p []byte) (int, error) {
	if w.finished {
		return 0, errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.err != nil {
		return 0, w.err
	}
	fc := w.fc
	if !w.headerSent {
		if len(fc.body)+len(p) <= fastOutMax {
			fc.body = append(fc.body, p...)
			return len(p), nil
		}
		w.sendHead()
	}
	if w.chunking {
		fc.out = strconv.AppendInt(fc.out, int64(len(p)), 16)
		fc.out = append(fc.out, '\r', '\n')
		fc.out = append(fc.out, p...)
		fc.out = append(fc.out, '\r', '\n')
	} else {
		fc.out = append(fc.out, p...)
	}
	if len(fc.out) >= fastOutMax {
		w.flushOut()
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// sendHead puts the response's head, and the body buffered so far, in
// fc.out, deciding its framing: a Content-Length when the handler has
// returned (or gave one), chunked otherwise.
func (w *fastWriter) sendHead() {
	fc := w.fc
	w.headerSent = true
	out := append(fc.out[:0], w.head...)
	body := fc.body
	if bodyAllowedForStatus(w.status) {
		switch {
		case w.contentLength != -1:
			out = append(out, "Content-Length: "...)
			out = strconv.AppendInt(out, w.contentLength, 10)
			out = append(out, '\r', '\n')
		case w.handlerDone && !w.hasTE:
			out = append(out, "Content-Length: "...)
			out = strconv.AppendInt(out, int64(len(body)), 10)
			out = append(out, '\r', '\n')
			w.contentLength = int64(len(body))
		case w.teIdentity:
			w.closeAfter = true
		default:
			w.chunking = true
			out = append(out, "Transfer-Encoding: chunked\r\n"...)
		}
		if !w.hasCE && !w.haveType && !w.hasTE && len(body) > 0 {
			out = append(out, "Content-Type: "...)
			out = append(out, http.DetectContentType(body[:min(len(body), 512)])...)
			out = append(out, '\r', '\n')
		}
	}
	if w.closeAfter && !tokenIn(w.header["Connection"], "close") {
		out = append(out, "Connection: close\r\n"...)
	}
	if !w.hasDate {
		out = append(out, fc.fs.dateLine(time.Now())...)
	}
	out = append(out, '\r', '\n')
	if len(body) > 0 {
		if w.chunking {
			out = strconv.AppendInt(out, int64(len(body)), 16)
			out = append(out, '\r', '\n')
			out = append(out, body...)
			out = append(out, '\r', '\n')
		} else {
			out = append(out, body...)
		}
	}
	fc.out, fc.body = out, body[:0]
}

// Flush sends what is buffered (the head first).
func (w *fastWriter) Flush() { _ = w.FlushError() }

// FlushError sends what is buffered (the head first), as Flush, and
// returns the connection's write error.
func (w *fastWriter) FlushError() error {
	if w.finished {
		return errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		w.sendHead()
	}
	w.flushOut()
	return w.err
}

func (w *fastWriter) flushOut() {
	fc := w.fc
	if len(fc.out) == 0 || w.err != nil {
		fc.out = fc.out[:0]
		return
	}
	_, w.err = fc.c.Write(fc.out)
	fc.out = fc.out[:0]
}

// SetReadDeadline is for reads of the request's body: here the body is in
// memory, read at once; nothing else reads the connection while the
// handler runs but the watch of the client, which needs no deadline.
func (w *fastWriter) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline sets the connection's write deadline.
func (w *fastWriter) SetWriteDeadline(t time.Time) error { return w.fc.c.SetWriteDeadline(t) }

// EnableFullDuplex: the body is in memory, so it can be read while the
// response is written.
func (w *fastWriter) EnableFullDuplex() error { return nil }

// finish ends the response after the handler returned: what is buffered
// goes out in one write. A response shorter than its Content-Length
// closes the connection, as net/http's server does.
func (w *fastWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.handlerDone = true
	if !w.headerSent {
		w.sendHead()
	}
	if w.chunking {
		w.fc.out = append(w.fc.out, "0\r\n\r\n"...)
	}
	if w.contentLength != -1 && w.written != w.contentLength && bodyAllowedForStatus(w.status) {
		// The client would wait for the rest: the connection closes (as
		// net/http's does, without saying so in the head).
		w.closeAfter = true
	}
	w.finished = true
	w.flushOut()
}

var errWriteAfterHandler = errors.New("serve: write to a response after its handler returned")
