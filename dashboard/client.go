package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// DefaultClientTimeout bounds each request of a [Client] whose HTTP
// client is not given: a driver that does not answer within it is gone.
const DefaultClientTimeout = 5 * time.Second

// Client reads a driver's status endpoint (a [Dashboard] the driver
// serves): its view, for `goray status`, and its page and API through a
// local proxy, for `goray dashboard --driver`. The zero value is not
// usable; set Addr. A Client is safe for concurrent use.
type Client struct {
	// Addr is the endpoint: host:port, or a URL such as
	// http://host:port/prefix/ for a dashboard mounted under a prefix.
	Addr string
	// Token is sent as "Authorization: Bearer TOKEN" when set.
	Token string
	// HTTP makes the requests of View; nil means a client whose requests
	// time out after DefaultClientTimeout.
	HTTP *http.Client
}

// GoneError is the error of a driver that could not be reached or
// stopped answering: refused, reset, timed out, or its answer cut short.
type GoneError struct {
	Addr string
	Err  error
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("the driver at %s is gone: %v", e.Addr, e.Err)
}

func (e *GoneError) Unwrap() error { return e.Err }

// base is the endpoint's URL, ending in "/".
func (c *Client) base() (*url.URL, error) {
	raw := c.Addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("driver address %q: want host:port or an http(s) URL", c.Addr)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// View returns the driver's current view. A driver that cannot be reached
// or does not answer in time is a *GoneError; a refused token is an error
// that says so.
func (c *Client) View(ctx context.Context) (*View, error) {
	u, err := c.base()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath("api/view").String(), nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: DefaultClientTimeout}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &GoneError{Addr: c.Addr, Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		if c.Token == "" {
			return nil, fmt.Errorf("the driver at %s wants a token (401): pass it with --token or $GORAY_STATUS_TOKEN", c.Addr)
		}
		return nil, fmt.Errorf("the driver at %s refused the token (401)", c.Addr)
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("the driver at %s answered %s: %s", c.Addr, resp.Status, strings.TrimSpace(string(body)))
	}
	var v View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &GoneError{Addr: c.Addr, Err: fmt.Errorf("reading its view: %w", unwrapURLError(err))}
	}
	return &v, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Proxy returns a handler that serves the driver's page and API, adding
// the token: a browser on this machine reaches a driver whose endpoint
// wants a token, or is reachable only from here. While the driver is
// gone, GET /api/view and /api/events answer a view whose Problems say
// so (the page shows it), and anything else 502.
func (c *Client) Proxy() (http.Handler, error) {
	target, err := c.base()
	if err != nil {
		return nil, err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Cookie")
			r.Out.Header.Del("Authorization")
			if c.Token != "" {
				r.Out.Header.Set("Authorization", "Bearer "+c.Token)
			}
		},
		FlushInterval: -1, // server-sent events pass at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			gone := &GoneError{Addr: c.Addr, Err: err}
			v := &View{Time: time.Now(), Problems: []string{gone.Error()}}
			switch strings.TrimPrefix(r.URL.Path, "/") {
			case "api/view":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadGateway)
				json.NewEncoder(w).Encode(v)
			case "api/events":
				// One event, then the stream ends; the browser reconnects
				// after its retry delay and finds the driver back, or not.
				w.Header().Set("Content-Type", "text/event-stream")
				data, _ := json.Marshal(v)
				fmt.Fprintf(w, "retry: 2000\nevent: view\ndata: %s\n\n", data)
			default:
				http.Error(w, gone.Error(), http.StatusBadGateway)
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
			return
		}
		rp.ServeHTTP(w, r)
	}), nil
}

// ServeProxy serves [Client.Proxy] on ln until ctx ends, as
// [Dashboard.Serve] serves a dashboard; ln must be on loopback, since the
// proxy adds the token for whoever reaches it.
func (c *Client) ServeProxy(ctx context.Context, ln net.Listener) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return fmt.Errorf("dashboard: proxy on %s: the proxy adds the driver's token for whoever reaches it, so it listens on loopback only", ln.Addr())
	}
	h, err := c.Proxy()
	if err != nil {
		ln.Close()
		return err
	}
	return serveOn(ctx, ln, h, false)
}
