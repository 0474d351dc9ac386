package serve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// connPool is the proxy's own HTTP/1.1 client, for requests to Process
// replicas whose body is in memory (or absent) when the server uses its
// default client (Options.Client nil). http.Transport runs two goroutines
// per connection, one writing requests and one reading responses, and
// hands every request and response between them and the caller; here the
// handler's goroutine writes the request and reads the response itself,
// with net/http's own request writer (Request.Write) and response parser
// (http.ReadResponse), over pooled keep-alive connections.
//
// A connection goes back to the pool only when its response was read to
// its end, was framed (a length or chunks), did not say Connection: close,
// and the request's context did not end during the exchange; otherwise it
// is closed. Before an idle connection is used again, a non-blocking read
// checks that its server has not closed it (what the Transport's reading
// goroutine notices). A request on a reused connection that finds it
// closed before any byte of the response is sent again on a new
// connection when nothing of it was written, or when its method is
// idempotent, as http.Transport does. 1xx responses other than 101 are
// skipped, as the Transport skips them.
type connPool struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // per address
	idleTimeout time.Duration // an idle connection is closed after it

	mu     sync.Mutex
	idle   map[string][]*poolConn // by address, the most recently used last
	sweep  *time.Timer            // closes connections idle too long
	closed bool
}

func newConnPool() *connPool {
	return &connPool{
		dial:    (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		maxIdle: 256, idleTimeout: 90 * time.Second,
		idle: map[string][]*poolConn{},
	}
}

// poolConn is one connection to a replica's server.
type poolConn struct {
	net.Conn
	addr   string
	br     *bufio.Reader
	bw     *bufio.Writer
	nwrite int64     // bytes written to Conn
	since  time.Time // idle since
	reused bool      // it carried a request before this one
	alive  func() bool
}

func (c *poolConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.nwrite += int64(n)
	return n, err
}

// get returns an idle connection to addr that is still open, or a new one.
func (p *connPool) get(ctx context.Context, addr string) (*poolConn, error) {
	p.mu.Lock()
	for list := p.idle[addr]; len(list) > 0; list = p.idle[addr] {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		p.idle[addr] = list[:len(list)-1]
		p.mu.Unlock()
		if c.br.Buffered() == 0 && c.alive() {
			c.reused = true
			return c, nil
		}
		c.Conn.Close() // closed by its server, or it sent what nobody asked for
		p.mu.Lock()
	}
	p.mu.Unlock()
	nc, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &poolConn{Conn: nc, addr: addr}
	c.br = bufio.NewReaderSize(nc, 4<<10)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	c.alive = aliveCheck(nc)
	return c, nil
}

// put returns c to the pool, or closes it.
func (p *connPool) put(c *poolConn) {
	c.since = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle[c.addr]) >= p.maxIdle {
		p.mu.Unlock()
		c.Conn.Close()
		return
	}
	p.idle[c.addr] = append(p.idle[c.addr], c)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(p.idleTimeout, p.sweepIdle)
	}
	p.mu.Unlock()
}

// sweepIdle closes the connections idle for longer than idleTimeout.
func (p *connPool) sweepIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweep = nil
	if p.closed {
		return
	}
	cutoff := time.Now().Add(-p.idleTimeout)
	left := false
	for addr, list := range p.idle {
		keep := list[:0]
		for _, c := range list {
			if c.since.Before(cutoff) {
				c.Conn.Close()
			} else {
				keep = append(keep, c)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(p.idle, addr)
		} else {
			p.idle[addr], left = keep, true
		}
	}
	if left {
		p.sweep = time.AfterFunc(p.idleTimeout, p.sweepIdle)
	}
}

// close closes the idle connections; those in use close when their
// requests end.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	for _, list := range p.idle {
		for _, c := range list {
			c.Conn.Close()
		}
	}
	clear(p.idle)
}

// aLongTimeAgo is a deadline that has passed: it interrupts blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// errNothingRead is a connection's failure before any byte of the
// response arrived.
type errNothingRead struct{ err error }

func (e errNothingRead) Error() string { return e.err.Error() }
func (e errNothingRead) Unwrap() error { return e.err }

// roundTrip sends req (whose body, if any, GetBody can make again) and
// returns the response, whose body the caller must close. Its context's
// end interrupts the exchange, the response body's reads included.
func (p *connPool) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for {
		c, err := p.get(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		start := c.nwrite
		resp, err := p.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		if !c.reused || ctx.Err() != nil || !p.retryable(req, err, c.nwrite == start) {
			return nil, err
		}
		// The server closed the reused connection: once more, on a new one.
		if req.GetBody != nil {
			b, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			req.Body = b
		}
	}
}

// retryable reports whether a request whose reused connection failed may
// be sent again: nothing of it was written, or nothing was read back and
// it is idempotent (as http.Transport decides).
func (p *connPool) retryable(req *http.Request, err error, nothingWritten bool) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if nothingWritten {
		return true
	}
	if _, ok := errors.AsType[errNothingRead](err); !ok {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// exchange writes req on c and reads the head of its response.
func (p *connPool) exchange(ctx context.Context, c *poolConn, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.Conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.Conn.Close()
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	reusable := true
	for informational := 0; ; informational++ {
		if informational > 10 {
			return fail(errors.New("serve: more than 10 informational (1xx) responses"))
		}
		if _, err := c.br.Peek(1); err != nil {
			return fail(errNothingRead{err})
		}
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // informational: the final response follows
		}
		if resp.StatusCode == http.StatusSwitchingProtocols || resp.Close {
			reusable = false
		}
		b := &poolBody{p: p, c: c, ctx: ctx, body: resp.Body, stop: stop, reusable: reusable}
		if resp.Body == http.NoBody {
			b.eof = true
		}
		resp.Body = b
		return resp, nil
	}
}

// poolBody is a response's body: its end gives the connection back.
type poolBody struct {
	p        *connPool
	c        *poolConn
	ctx      context.Context
	body     io.ReadCloser
	stop     func() bool
	reusable bool
	eof      bool
	done     bool
}

func (b *poolBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil && b.ctx.Err() != nil:
		err = b.ctx.Err() // interrupted by the context's end, as the Transport says
	}
	return n, err
}

func (b *poolBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	interrupted := !b.stop()
	if b.eof && b.reusable && !interrupted {
		b.p.put(b.c)
	} else {
		b.c.Conn.Close()
	}
	return nil
}
