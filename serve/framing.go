package serve

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// A request with both Content-Length and Transfer-Encoding may be read one
// way by a front proxy and the other by the ingress (request smuggling):
// RFC 9112 §6.1 says the server must close the connection after answering
// it. net/http reads it by its Transfer-Encoding and deletes the
// Content-Length header before the handler sees the request, so Serve's
// connections follow the framing of the requests that pass through them
// (a framer: the heads line by line, the bodies skipped by their length or
// their chunks) and note, for every request head, whether it had both. The
// handler takes the note of its request (requests on a connection reach
// the handler in order) and refuses such a request with 400, closing the
// connection, as Envoy does by default.

// framedListener wraps the connections Serve accepts in framedConns.
type framedListener struct{ net.Listener }

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, isTLS := c.(*tls.Conn); isTLS {
		return c, nil // net/http needs to see the *tls.Conn itself
	}
	return &framedConn{Conn: c}, nil
}

type framedConnKey struct{}

// connContext keeps a framedConn in its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, framedConnKey{}, fc)
	}
	return ctx
}

// bothLengths reports whether r's head had both Content-Length and
// Transfer-Encoding, when its connection is one of Serve's.
func bothLengths(r *http.Request) bool {
	fc, _ := r.Context().Value(framedConnKey{}).(*framedConn)
	return fc != nil && fc.next()
}

// framedConn is a connection whose reads go through a framer.
type framedConn struct {
	net.Conn
	mu sync.Mutex
	f  framer
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.f.feed(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// next takes the note of the oldest request head not yet taken.
func (c *framedConn) next() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.f.heads) == 0 {
		return false
	}
	both := c.f.heads[0]
	c.f.heads = c.f.heads[1:]
	return both
}

// The framer's states.
const (
	frameHead      = iota // a request head, line by line
	frameBody             // left bytes of a body of known length
	frameChunkSize        // a chunk's size line
	frameChunkData        // left bytes of a chunk, then its CRLF
	frameTrailer          // trailer lines, up to an empty one
	frameOff              // lost track (net/http refuses what it cannot parse): no more notes
)

// maxFrameLine bounds a line the framer keeps while it waits for its end
// (net/http's default MaxHeaderBytes is 1 MiB).
const maxFrameLine = 1 << 20

// framer follows HTTP/1.1 request framing (RFC 9112 §6.3 for a server).
type framer struct {
	state int
	line  []byte // the current line so far
	left  int64  // bytes left of a body or a chunk (its data and CRLF)

	started   bool // the head's request line was read
	hasLength bool // the head has Content-Length
	hasTE     bool // and Transfer-Encoding
	chunked   bool // the last transfer coding is chunked
	length    int64

	heads []bool // per complete head not yet taken: had both
}

func (f *framer) feed(p []byte) {
	for len(p) > 0 && f.state != frameOff {
		switch f.state {
		case frameBody, frameChunkData:
			k := min(int64(len(p)), f.left)
			p = p[k:]
			f.left -= k
			if f.left == 0 {
				if f.state == frameBody {
					f.state = frameHead
				} else {
					f.state = frameChunkSize
				}
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(f.line)+len(p) > maxFrameLine {
				f.state = frameOff
				return
			}
			f.line = append(f.line, p...)
			return
		}
		line := p[:i]
		if len(f.line) > 0 {
			if len(f.line)+i > maxFrameLine {
				f.state = frameOff
				return
			}
			f.line = append(f.line, line...)
			line = f.line
		}
		p = p[i+1:]
		f.endLine(bytes.TrimSuffix(line, []byte{'\r'}))
		f.line = f.line[:0]
	}
}

func (f *framer) endLine(line []byte) {
	switch f.state {
	case frameHead:
		if !f.started {
			if len(line) > 0 { // net/http skips empty lines before a request
				f.started = true
			}
			return
		}
		if len(line) > 0 {
			name, value, ok := bytes.Cut(line, []byte{':'})
			if !ok {
				return
			}
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
				if err != nil || n < 0 {
					f.state = frameOff
					return
				}
				f.hasLength, f.length = true, n
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				f.hasTE = true
				codings := bytes.Split(value, []byte{','})
				f.chunked = bytes.EqualFold(bytes.TrimSpace(codings[len(codings)-1]), []byte("chunked"))
			}
			return
		}
		// The head's end.
		f.heads = append(f.heads, f.hasLength && f.hasTE)
		switch {
		case f.hasTE && f.chunked:
			f.state = frameChunkSize
		case f.hasTE:
			f.state = frameOff // net/http refuses other transfer codings
		case f.hasLength && f.length > 0:
			f.state, f.left = frameBody, f.length
		}
		f.started, f.hasLength, f.hasTE, f.chunked, f.length = false, false, false, false, 0
	case frameChunkSize:
		size, _, _ := bytes.Cut(line, []byte{';'})
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			f.state = frameOff
		case n == 0:
			f.state = frameTrailer
		default:
			f.state, f.left = frameChunkData, n+2 // the data and its CRLF
		}
	case frameTrailer:
		if len(line) == 0 {
			f.state = frameHead
		}
	}
}
