package serve

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// parseHead takes a response as http.ReadResponse, removeHopHeaders and
// copyResponse's copy of the header would, or leaves it to them having
// changed nothing; the body of one it takes reads as ReadResponse's does.
func TestParseHeadAsReadResponse(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Sun, 06 Dec 2026 18:00:00 GMT\r\nContent-Length: 5\r\n\r\n"
	cases := []struct {
		name, method, resp string
		taken              bool // parseHead takes it
	}{
		{"plain", "POST", ok + "hello", true},
		{"no reason", "POST", "HTTP/1.1 404\r\nContent-Length: 2\r\n\r\nno", true},
		{"empty reason", "GET", "HTTP/1.1 500 \r\nContent-Length: 0\r\n\r\n", true},
		{"odd reason", "GET", "HTTP/1.1 201 Made\tIt !\r\nContent-Length: 1\r\n\r\nx", true},
		{"lower-case names", "POST", "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-request-id: 7\r\ncontent-length: 3\r\n\r\nabc", true},
		{"odd-case names", "POST", "HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 3\r\nX-ODD_name-1: a\r\nX-Odd_Name: b\r\nX-2x: c\r\n\r\nabc", true},
		{"repeated header", "POST", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nset-cookie: c=3\r\nContent-Length: 0\r\n\r\n", true},
		{"white space around values", "POST", "HTTP/1.1 200 OK\r\nX-A:   spaced \t \r\nX-B:\tt\r\nX-Empty:\r\nX-Blank:   \r\nContent-Length:  2 \r\n\r\nhi", true},
		{"obs-text value", "POST", "HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n", true},
		{"connection close", "POST", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nby", true},
		{"connection keep-alive", "POST", "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nhi", true},
		{"connection list", "POST", "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nhi", true},
		{"hop-by-hop headers", "POST", "HTTP/1.1 200 OK\r\nProxy-Connection: x\r\nTe: trailers\r\nTrailer: X-T\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nhi", true},
		{"leading zeros", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 002\r\n\r\nhi", true},
		{"redirect", "GET", "HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", true},
		{"many headers", "POST", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: v\r\n", maxParsedHeaders-1) + "Content-Length: 0\r\n\r\n", true},
		{"too many headers", "POST", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: v\r\n", maxParsedHeaders) + "Content-Length: 0\r\n\r\n", false},
		{"chunked", "POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false},
		{"no length", "POST", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", false},
		{"two lengths", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", false},
		{"bad length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nhi", false},
		{"negative length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false},
		{"empty length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", false},
		{"HTTP/1.0", "POST", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"informational", "POST", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"no content", "DELETE", "HTTP/1.1 204 No Content\r\n\r\n", false},
		{"not modified", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false},
		{"connection names a header", "POST", "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nhi", false},
		{"pragma", "POST", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nhi", false},
		{"folded line", "POST", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nhi", false},
		{"space before colon", "POST", "HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 2\r\n\r\nhi", false},
		{"no colon", "POST", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 2\r\n\r\nhi", false},
		{"empty name", "POST", "HTTP/1.1 200 OK\r\n: a\r\nContent-Length: 2\r\n\r\nhi", false},
		{"control byte in value", "POST", "HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\nhi", false},
		{"bare LF", "POST", "HTTP/1.1 200 OK\nContent-Length: 2\n\nhi", false},
		{"bare LF at the end", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nhi", false},
		{"CR in value", "POST", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 2\r\n\r\nhi", false},
		{"bad status", "POST", "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"long status", "POST", "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nhi", false},
		{"status 600", "POST", "HTTP/1.1 600 X\r\nContent-Length: 2\r\n\r\nhi", false},
	}
	taken := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			br := bufio.NewReaderSize(strings.NewReader(tc.resp), 4<<10)
			_, err := br.Peek(1)
			is.NoErr(err)
			head := peekHead(br)
			dst := http.Header{}
			var status int
			var n int64
			var closeConn, got bool
			if head != nil {
				status, n, closeConn, got = parseHead(head, tc.method, dst)
			}
			is.Equal(got, tc.taken) // taken by parseHead
			if !got {
				is.Equal(len(dst), 0) // left as it was
				return
			}
			taken++
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tc.resp)), &http.Request{Method: tc.method})
			is.NoErr(err)
			defer resp.Body.Close()
			removeHopHeaders(resp.Header)
			is.Equal(status, resp.StatusCode)
			is.Equal(n, resp.ContentLength)
			is.Equal(closeConn, resp.Close)
			is.Equal(dst, resp.Header)
			want, err := io.ReadAll(resp.Body)
			is.NoErr(err)
			_, _ = br.Discard(len(head))
			body, err := io.ReadAll(&fixedBody{r: br, n: n})
			is.NoErr(err)
			is.Equal(body, want)
		})
	}
	if taken < 15 {
		t.Fatalf("parseHead took %d responses; the test compares too few", taken)
	}
}

// A fixed-length body cut short by the connection's end is an unexpected
// EOF, never a complete body.
func TestFixedBodyCutShort(t *testing.T) {
	is := is.New(t)
	_, err := io.ReadAll(&fixedBody{r: bufio.NewReader(strings.NewReader("short")), n: 10})
	is.Equal(err, io.ErrUnexpectedEOF)
}

// A head larger than the reader's buffer, or cut off by the connection's
// end, is left to http.ReadResponse.
func TestPeekHeadLimits(t *testing.T) {
	is := is.New(t)
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\nContent-Length: 0\r\n\r\n"
	br := bufio.NewReaderSize(strings.NewReader(big), 4<<10)
	is.True(peekHead(br) == nil)
	resp, err := http.ReadResponse(br, nil) // nothing was consumed
	is.NoErr(err)
	is.Equal(len(resp.Header.Get("X-Big")), 5000)
	cut := "HTTP/1.1 200 OK\r\nContent-Le"
	br = bufio.NewReader(strings.NewReader(cut))
	is.True(peekHead(br) == nil)
	is.Equal(br.Buffered(), len(cut)) // for ReadResponse, which says what is wrong
	_, err = http.ReadResponse(br, nil)
	is.True(err != nil)
}

// forwardReq.write writes what net/http's Request.Write writes for the
// proxy's request (the client's header cloned, the hop-by-hop ones and
// Expect deleted), read back by http.ReadRequest.
func TestForwardReqWritesAsRequestWrite(t *testing.T) {
	headers := []http.Header{
		{},
		{"User-Agent": {"curl/8"}, "Accept": {"*/*"}},
		{"User-Agent": {""}},
		{"User-Agent": {}},
		{"User-Agent": {"a", "b"}},
		{"X-Multi": {"1", "2"}, "Content-Type": {"application/json"}},
		{"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"h"}, "X-Keep": {"k"}, "Keep-Alive": {"timeout=5"}},
		{"Connection": {"x-lower"}, "X-Lower": {"h"}},
		{"Te": {"trailers"}, "Trailer": {"X-T"}, "Upgrade": {"h2c"}, "Proxy-Connection": {"x"}, "Transfer-Encoding": {"chunked"}},
		{"Expect": {"100-continue"}, "Host": {"elsewhere"}, "Content-Length": {"99"}},
		{"X-Lines": {"a\r\nb", " padded "}},
		{"Idempotency-Key": {"k1"}, "Serve_multiplexed_model_id": {"m"}},
	}
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		for _, body := range []string{"", `{"a":1}`, strings.Repeat("x", 10), strings.Repeat("y", 1000)} {
			for i, h := range headers {
				is := is.New(t)
				uri := "/a%2Fb/c?q=1&r=%20"
				fr := &forwardReq{method: method, uri: uri, header: h}
				if body != "" {
					fr.body = []byte(body)
				}
				var got bytes.Buffer
				bw := bufio.NewWriter(&got)
				fr.write(bw, "10.0.0.1:8000")
				is.NoErr(bw.Flush())

				var rb io.Reader = http.NoBody
				if body != "" {
					rb = strings.NewReader(body)
				}
				req, err := http.NewRequest(method, "http://10.0.0.1:8000", rb)
				is.NoErr(err)
				req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "/a/b/c", "/a%2Fb/c", "q=1&r=%20"
				req.Header = h.Clone()
				removeHopHeaders(req.Header)
				req.Header.Del("Expect")
				var want bytes.Buffer
				is.NoErr(req.Write(&want))

				g, err := http.ReadRequest(bufio.NewReader(&got))
				is.NoErr(err)
				w, err := http.ReadRequest(bufio.NewReader(&want))
				is.NoErr(err)
				is.Equal(g.Method, w.Method)
				is.Equal(g.RequestURI, w.RequestURI)
				is.Equal(g.Host, w.Host)
				is.Equal(g.ContentLength, w.ContentLength)
				is.Equal(g.TransferEncoding, w.TransferEncoding)
				if !maps.EqualFunc(g.Header, w.Header, slices.Equal) {
					t.Errorf("%s, body %q, header %d: wrote %v, Request.Write %v", method, body, i, g.Header, w.Header)
				}
				gb, err := io.ReadAll(g.Body)
				is.NoErr(err)
				wb, err := io.ReadAll(w.Body)
				is.NoErr(err)
				is.Equal(gb, wb)
			}
		}
	}
}
