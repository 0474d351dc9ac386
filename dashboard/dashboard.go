package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// DefaultAddr is the address [Dashboard.Listen] binds when given none:
// loopback only, on Ray's dashboard port.
const DefaultAddr = "127.0.0.1:8265"

// Options configures a [Dashboard]. A nil *Options means the defaults.
type Options struct {
	// Interval is how often the event stream sends a new view; 0 means 1s.
	Interval time.Duration
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Token, when set, is required on every request, as the header
	// "Authorization: Bearer TOKEN"; a request without it, or with
	// another, gets 401 and nothing else. [Dashboard.Serve] refuses to
	// serve on an address that is not loopback without one. [NewToken]
	// makes one.
	Token string
}

// StatusSource reports serve deployments; *serve.Server is one.
type StatusSource interface {
	Status() serve.Status
}

var _ StatusSource = (*serve.Server)(nil)

// Dashboard is a read-only web view of a cluster. It is an http.Handler:
//
//	GET /             the page
//	GET /static/...   its CSS and JavaScript
//	GET /api/view     the current [View] as JSON
//	GET /api/events   a server-sent event stream of views, one per Interval
//
// Every other method gets 405. A Dashboard is safe for concurrent use.
type Dashboard struct {
	c        *ray.Cluster
	interval time.Duration
	log      *slog.Logger
	mux      *http.ServeMux
	token    []byte // Options.Token, or nil

	chips chipCache // the last read of the nodes' chip metrics (chips.go)

	mu      sync.Mutex
	runs    []*TrainRun
	servers []StatusSource
}

//go:embed static
var static embed.FS

// New returns a dashboard of c.
func New(c *ray.Cluster, opts *Options) (*Dashboard, error) {
	if c == nil {
		return nil, errors.New("dashboard.New: nil cluster")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("dashboard.New: negative Interval %v; use 0 for the default of 1s", opts.Interval)
	}
	d := &Dashboard{c: c, interval: opts.Interval, log: opts.Logger, mux: http.NewServeMux()}
	if opts.Token != "" {
		d.token = []byte(opts.Token)
	}
	if d.interval == 0 {
		d.interval = time.Second
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	d.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	})
	d.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	d.mux.HandleFunc("GET /api/view", d.serveView)
	d.mux.HandleFunc("GET /api/events", d.serveEvents)
	d.mux.HandleFunc("GET /metrics", d.serveMetrics)
	return d, nil
}

// TrackRun adds a training run to the dashboard.
func (d *Dashboard) TrackRun(r *TrainRun) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs = append(d.runs, r)
}

// TrackServe adds a serve server's deployments to the dashboard.
func (d *Dashboard) TrackServe(s StatusSource) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.servers = append(d.servers, s)
}

// View returns the cluster's current view.
func (d *Dashboard) View(ctx context.Context) *View { return d.buildView(ctx) }

// ServeHTTP serves the page and the API; it refuses every method but GET
// and HEAD, and, when Options.Token is set, every request without it
// (401, saying nothing else).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.token != nil && !d.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="goray"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the dashboard is read-only: only GET and HEAD are allowed", http.StatusMethodNotAllowed)
		return
	}
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) serveView(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(d.buildView(r.Context())); err != nil {
		d.log.Debug("dashboard: write view", "err", err)
	}
}

// serveEvents streams a view at once and then every interval, until the
// client goes away.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(d.interval)
	defer tick.Stop()
	for {
		data, err := json.Marshal(d.buildView(r.Context()))
		if err != nil {
			d.log.Debug("dashboard: encode view", "err", err)
			return
		}
		if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", data); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// Listen listens on addr for the dashboard; "" means [DefaultAddr],
// loopback only. Binding another interface exposes the cluster's state
// (node names, labels, task names) to whoever can reach it; see
// docs/dashboard.md.
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves the dashboard on ln until ctx ends, then shuts the server
// down (closing open event streams) and returns nil. When ln is on a
// loopback address, requests whose Host is not a loopback name are
// refused with 421, so a web page cannot read the dashboard through DNS
// rebinding. On any other address it serves only with Options.Token set,
// and returns an error at once without it.
func (d *Dashboard) Serve(ctx context.Context, ln net.Listener) error {
	return serveOn(ctx, ln, d, d.token != nil)
}

// serveOn serves h on ln until ctx ends, loopback-only on loopback; off
// loopback it refuses to serve unless h requires a token.
func serveOn(ctx context.Context, ln net.Listener, h http.Handler, hasToken bool) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		h = loopbackOnly(h)
	} else if !hasToken {
		ln.Close()
		return fmt.Errorf("dashboard: serve on %s: the address is not loopback and Options.Token is empty; a status endpoint reachable from other machines requires a token (dashboard.NewToken; clients send Authorization: Bearer TOKEN), or listen on 127.0.0.1 and tunnel to it", ln.Addr())
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("dashboard: serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shut)
	<-errc
	return err
}

// ListenAndServe is [Listen] and [Dashboard.Serve] in one call.
func (d *Dashboard) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	return d.Serve(ctx, ln)
}

// loopbackOnly refuses requests whose Host header names anything but a
// loopback address or localhost.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, fmt.Sprintf("the dashboard listens on loopback and serves only Host localhost, 127.0.0.1 or [::1], not %q", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
