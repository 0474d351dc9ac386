package serve

import (
	"bytes"
	"net/http"
	"net/textproto"
)

// maxParsedHeaders bounds the header lines parseHead takes.
const maxParsedHeaders = 32

// parseHead parses the head of a plain response to a request of method
// (the status line and header, through the empty line that ends them)
// and adds its header lines to dst, but for the hop-by-hop ones
// (hopHeaders), as http.ReadResponse followed by removeHopHeaders and a
// copy into dst would. It returns the status, the body's length, whether
// the server closes the connection after it, and true; or false, having
// changed nothing, when the response is not one it takes: anything but
// HTTP/1.1; an informational, 204 or 304 status, or a response to HEAD;
// no Content-Length, more than one, or one that is not a number; a
// Transfer-Encoding; a Connection header naming anything but close and
// keep-alive; a Pragma header (ReadResponse adds a Cache-Control for
// it); a folded, malformed or invalid line; more than maxParsedHeaders
// lines. http.ReadResponse reads those.
//
// The values, and the names already in canonical form, share one string
// of the head; other names are canonicalised as net/http does.
func parseHead(head []byte, method string, dst http.Header) (status int, length int64, closeConn, ok bool) {
	const proto = "HTTP/1.1 "
	if method == http.MethodHead || len(head) < len(proto)+3 || string(head[:len(proto)]) != proto {
		return 0, 0, false, false
	}
	d := head[len(proto):]
	if d[0] < '2' || d[0] > '5' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' {
		return 0, 0, false, false
	}
	status = int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0')
	if status == http.StatusNoContent || status == http.StatusNotModified {
		return 0, 0, false, false
	}
	line, rest, found := cutLine(d[3:])
	if !found || (len(line) > 0 && line[0] != ' ') || !validValue(line) {
		return 0, 0, false, false
	}
	type field struct {
		k, v      [2]int // offsets in head
		canonical bool
	}
	var fields [maxParsedHeaders]field
	nf := 0
	length = -1
	for {
		start := len(head) - len(rest)
		line, rest, found = cutLine(rest)
		if !found {
			return 0, 0, false, false
		}
		if len(line) == 0 {
			break // the end of the head
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validName(line[:colon]) {
			return 0, 0, false, false // folded (leading white space), or malformed
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !validValue(value) {
			return 0, 0, false, false
		}
		canonical := isCanonical(name)
		var key string
		if canonical {
			key = string(name) // compared only: no allocation
		} else {
			key = textproto.CanonicalMIMEHeaderKey(string(name))
		}
		switch key {
		case "Transfer-Encoding", "Pragma":
			return 0, 0, false, false
		case "Connection":
			c, ok := connectionOptions(value)
			if !ok {
				return 0, 0, false, false // names a header to remove
			}
			closeConn = closeConn || c
			continue
		case "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade":
			continue
		case "Content-Length":
			if length >= 0 {
				return 0, 0, false, false
			}
			if length = parseLength(value); length < 0 {
				return 0, 0, false, false
			}
		}
		if nf == len(fields) {
			return 0, 0, false, false
		}
		vs := start + colon + 1 + (len(line[colon+1:]) - len(trimLeftOWS(line[colon+1:])))
		fields[nf] = field{k: [2]int{start, start + colon}, v: [2]int{vs, vs + len(value)}, canonical: canonical}
		nf++
	}
	if length < 0 {
		return 0, 0, false, false // delimited by the connection's close
	}
	s := string(head)
	vals := make([]string, nf)
	for i, f := range fields[:nf] {
		key := s[f.k[0]:f.k[1]]
		if !f.canonical {
			key = textproto.CanonicalMIMEHeaderKey(key)
		}
		vals[i] = s[f.v[0]:f.v[1]]
		if vv, ok := dst[key]; ok {
			dst[key] = append(vv, vals[i])
		} else {
			dst[key] = vals[i : i+1 : i+1]
		}
	}
	return status, length, closeConn, true
}

// cutLine cuts b after its first CRLF: the line without it, and the rest.
// A line that ends in a bare LF, or holds a CR, is not found.
func cutLine(b []byte) (line, rest []byte, found bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

// validName reports whether b is an HTTP token (RFC 9110 §5.6.2).
func validName(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// validValue reports whether b holds no control character but tab.
func validValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// isCanonical reports whether the token b is in textproto's canonical
// form: its first letter and every letter after a hyphen upper case, the
// other letters lower case.
func isCanonical(b []byte) bool {
	upper := true
	for _, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z', !upper && 'A' <= c && c <= 'Z':
			return false
		}
		upper = c == '-'
	}
	return true
}

func trimLeftOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// connectionOptions reads a Connection header's value: whether it says
// close. ok is false when it names another option (a header to remove,
// an upgrade). Tokens compare ASCII case-insensitively, as net/http's.
func connectionOptions(value []byte) (closeConn, ok bool) {
	for tok := range bytes.SplitSeq(value, []byte(",")) {
		switch tok = trimOWS(tok); {
		case len(tok) == 0 || asciiEqualFold(string(tok), "keep-alive"):
		case asciiEqualFold(string(tok), "close"):
			closeConn = true
		default:
			return false, false
		}
	}
	return closeConn, true
}

// trimOWS trims the optional white space around a header value.
func trimOWS(b []byte) []byte {
	b = trimLeftOWS(b)
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseLength parses a Content-Length value of 1 to 18 digits, or
// returns -1.
func parseLength(b []byte) int64 {
	if len(b) == 0 || len(b) > 18 {
		return -1
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
