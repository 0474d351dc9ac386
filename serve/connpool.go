package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/internal/rawio"
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
	addr     string
	br       *bufio.Reader
	bw       *bufio.Writer
	nwrite   int64     // bytes written to Conn
	since    time.Time // idle since
	reused   bool      // it carried a request before this one
	deadline bool      // a request's deadline is set on Conn
	alive    func() bool
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
	nc = rawio.Wrap(nc)
	c := &poolConn{Conn: nc, addr: addr}
	c.br = bufio.NewReaderSize(nc, 4<<10)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	c.alive = aliveCheck(nc)
	return c, nil
}

// put returns c to the pool, or closes it.
func (p *connPool) put(c *poolConn) {
	if c.deadline {
		if c.Conn.SetDeadline(time.Time{}) != nil {
			c.Conn.Close()
			return
		}
		c.deadline = false
	}
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

// forwardReq is a request the proxy sends to a replica's server. Its head
// is written from the client's request as it is: no http.Request is made,
// no header map is copied.
type forwardReq struct {
	method string
	uri    string      // the request-target: path and query, escaped
	header http.Header // the client's; hop-by-hop headers and Expect are left out
	body   []byte      // the whole body, or nil for none
	// dst, when set, receives a plain response's header (see parseHead);
	// inDst then says that the response's Header is dst.
	dst   http.Header
	inDst bool
}

// roundTrip sends r to addr and returns the response, whose body the
// caller must close. The context's end interrupts the exchange, the
// response body's reads included.
func (p *connPool) roundTrip(ctx context.Context, addr string, r *forwardReq) (*http.Response, error) {
	for {
		c, err := p.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		start := c.nwrite
		resp, err := p.exchange(ctx, c, r)
		if err == nil {
			return resp, nil
		}
		if !c.reused || ctx.Err() != nil || !r.retryable(err, c.nwrite == start) {
			return nil, err
		}
		// The server closed the reused connection: once more, on a new one.
	}
}

// retryable reports whether a request whose reused connection failed may
// be sent again (its body is in memory): nothing of it was written, or
// nothing was read back and it is idempotent (as http.Transport decides).
func (r *forwardReq) retryable(err error, nothingWritten bool) bool {
	if nothingWritten {
		return true
	}
	if _, ok := errors.AsType[errNothingRead](err); !ok {
		return false
	}
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := r.header["Idempotency-Key"]
	_, k2 := r.header["X-Idempotency-Key"]
	return k1 || k2
}

// defaultUserAgent is what net/http's Request.Write sends when the
// request has no User-Agent header.
const defaultUserAgent = "Go-http-client/1.1"

// write writes r to bw as net/http's Request.Write writes the same
// request (URL http://host+uri, r.header, a body of its length): the
// request line, Host, User-Agent (the client's first, or net/http's
// default when it sent none), the other headers but for the hop-by-hop
// ones (hopHeaders and those the Connection header names) and Expect,
// Content-Length (when there is a body, and for POST, PUT and PATCH), and
// the body; header values with line breaks have them as spaces. The
// order of the headers differs (Request.Write sorts them by name).
func (r *forwardReq) write(bw *bufio.Writer, host string) {
	bw.WriteString(r.method)
	bw.WriteByte(' ')
	bw.WriteString(r.uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := defaultUserAgent
	if v, ok := r.header["User-Agent"]; ok {
		ua = ""
		if len(v) > 0 {
			ua = v[0]
		}
	}
	if ua != "" {
		writeHeaderLine(bw, "User-Agent", ua)
	}
	named := r.header["Connection"] // the hop-by-hop headers it names
	for k, vs := range r.header {
		if skipForwardHeader(k) || (named != nil && namedIn(named, k)) {
			continue
		}
		for _, v := range vs {
			writeHeaderLine(bw, k, v)
		}
	}
	if len(r.body) > 0 || r.method == http.MethodPost || r.method == http.MethodPut || r.method == http.MethodPatch {
		bw.WriteString("Content-Length: ")
		writeDecimal(bw, len(r.body))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	bw.Write(r.body)
}

// writeDecimal writes n ≥ 0 in decimal, without an allocation.
func writeDecimal(bw *bufio.Writer, n int) {
	div := 1
	for n/div >= 10 {
		div *= 10
	}
	for ; div > 0; div /= 10 {
		bw.WriteByte(byte('0' + n/div%10))
	}
}

// skipForwardHeader: the headers write leaves out by name (it writes Host,
// User-Agent and Content-Length itself).
func skipForwardHeader(k string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length", "Expect",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// namedIn reports whether one of the Connection header's values names k
// (as removeHopHeaders finds them).
func namedIn(connection []string, k string) bool {
	for _, v := range connection {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" && textproto.CanonicalMIMEHeaderKey(name) == k {
				return true
			}
		}
	}
	return false
}

// writeHeaderLine writes "k: v\r\n", v trimmed and its line breaks made
// spaces, as Request.Write does.
func writeHeaderLine(bw *bufio.Writer, k, v string) {
	v = textproto.TrimString(v)
	bw.WriteString(k)
	bw.WriteString(": ")
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
	}
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// exchange writes r on c and reads the head of its response.
func (p *connPool) exchange(ctx context.Context, c *poolConn, r *forwardReq) (*http.Response, error) {
	interrupt := func() { _ = c.Conn.SetDeadline(aLongTimeAgo) }
	var stop func() bool
	if dc, ok := ctx.(*deadlineCtx); ok {
		if parent, dl, ok := dc.unwatched(); ok {
			// The deadline goes on the connection (a timer of the
			// runtime's poller, set and cleared without an allocation);
			// only the parent's end is watched. Err says which ended.
			_ = c.Conn.SetDeadline(dl)
			c.deadline = true
			stop = context.AfterFunc(parent, interrupt)
		}
	}
	if stop == nil {
		stop = context.AfterFunc(ctx, interrupt)
	}
	fail := func(err error) (*http.Response, error) {
		stop()
		c.Conn.Close()
		return nil, err
	}
	r.write(c.bw, c.addr)
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	if _, err := c.br.Peek(1); err != nil {
		return fail(errNothingRead{err})
	}
	b := &poolBody{p: p, c: c, ctx: ctx, stop: stop, reusable: true}
	if r.dst != nil {
		if head := peekHead(c.br); head != nil {
			if status, n, closeConn, ok := parseHead(head, r.method, r.dst); ok {
				_, _ = c.br.Discard(len(head))
				r.inDst = true
				b.fixed = fixedBody{r: c.br, n: n}
				b.body = &b.fixed
				b.reusable = !closeConn
				b.eof = n == 0
				return &http.Response{
					Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
					Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: r.dst, ContentLength: n, Close: closeConn, Body: b,
				}, nil
			}
		}
	}
	req := &http.Request{Method: r.method} // for ReadResponse: a HEAD's response has no body
	for informational := 0; ; informational++ {
		if informational > 10 {
			return fail(errors.New("serve: more than 10 informational (1xx) responses"))
		}
		if informational > 0 {
			if _, err := c.br.Peek(1); err != nil {
				return fail(errNothingRead{err})
			}
		}
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue // informational: the final response follows
		}
		if resp.StatusCode == http.StatusSwitchingProtocols || resp.Close {
			b.reusable = false
		}
		b.body = resp.Body
		if resp.Body == http.NoBody {
			b.eof = true
		}
		resp.Body = b
		return resp, nil
	}
}

// peekHead returns the head of the response that begins in br (its
// status line and header, through the empty line that ends them) without
// consuming it; or nil when it does not fit in br's buffer, or the
// connection failed or ended before its end (http.ReadResponse then
// reads what there is, and says what is wrong).
func peekHead(br *bufio.Reader) []byte {
	from := 0 // where the line being scanned begins
	for {
		buf, _ := br.Peek(br.Buffered())
		for {
			i := bytes.IndexByte(buf[from:], '\n')
			if i < 0 {
				break
			}
			line := buf[from : from+i]
			from += i + 1
			if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
				return buf[:from]
			}
		}
		if len(buf) == br.Size() {
			return nil
		}
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil
		}
	}
}

// poolBody is a response's body: its end gives the connection back.
type poolBody struct {
	p        *connPool
	c        *poolConn
	ctx      context.Context
	body     io.Reader
	fixed    fixedBody // the body, when its head was parsed by parseHead
	stop     func() bool
	reusable bool
	eof      bool
	done     bool
}

// fixedBody reads a body of n bytes from r: io.EOF with its last bytes,
// io.ErrUnexpectedEOF when r ends before them.
type fixedBody struct {
	r *bufio.Reader
	n int64
}

func (f *fixedBody) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= int64(n)
	if f.n == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
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
