package train

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// The report endpoint: external programs (train.NewProgram) in any
// language report metrics, commit checkpoint directories and ask for the
// checkpoint to resume from and the attempt's world over HTTP and JSON, on
// the rendezvous's own listener (a connection whose first byte is an
// upper-case letter is HTTP). docs/train.md, "Reports from programs",
// is the protocol's reference; train/python/goray_train.py speaks it.

// runInfo is what the endpoint tells programs about the run.
type runInfo struct {
	run       string
	resume    *Checkpoint
	perSlice  int
	numSlices int
	log       *slog.Logger
	profilers []string // each rank's profiler address (profiler.go)
}

// maxReportBody bounds a request's body.
const maxReportBody = 1 << 20

// worldReply is the reply to GET /v1/world.
type worldReply struct {
	Run        string       `json:"run"`
	Attempt    int          `json:"attempt"`
	Rank       int          `json:"rank"`
	WorldSize  int          `json:"world_size"`
	SliceIndex int          `json:"slice_index"`
	NumSlices  int          `json:"num_slices"`
	Slices     []string     `json:"slices"`
	Storage    string       `json:"storage"`
	Iteration  int          `json:"iteration"`
	Checkpoint *resumeReply `json:"checkpoint"`
}

// resumeReply is the checkpoint a rank resumes from.
type resumeReply struct {
	Iteration int     `json:"iteration"`
	Metrics   Metrics `json:"metrics"`
	Ranks     []int   `json:"ranks"`
	// Dir is the directory this rank committed, else rank 0's; empty when
	// the checkpoint has no directory of either.
	Dir string `json:"dir"`
}

// reportRequest is the body of POST /v1/report.
type reportRequest struct {
	Run           string  `json:"run"`
	Rank          *int    `json:"rank"`
	Metrics       Metrics `json:"metrics"`
	CheckpointDir string  `json:"checkpoint_dir,omitempty"`
}

type reportReply struct {
	Iteration  int  `json:"iteration"`
	Checkpoint bool `json:"checkpoint"`
}

// endpoint serves the report endpoint of one attempt.
type endpoint struct {
	r    *rendezvous
	info runInfo
	ln   *connListener
	srv  *http.Server
	done chan struct{}

	mu    sync.Mutex
	iters map[int]int         // each rank's last report's iteration
	ranks map[int]*sync.Mutex // one request of a rank at a time
}

func newEndpoint(r *rendezvous, info runInfo) *endpoint {
	if info.log == nil {
		info.log = slog.New(slog.DiscardHandler)
	}
	e := &endpoint{r: r, info: info, ln: newConnListener(r.ln.Addr()), done: make(chan struct{}), iters: map[int]int{}, ranks: map[int]*sync.Mutex{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/world", e.world)
	mux.HandleFunc("/v1/report", e.report)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		e.refuse(w, req, http.StatusNotFound, fmt.Sprintf("no endpoint %s: use GET /v1/world or POST /v1/report", req.URL.Path))
	})
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() {
		defer close(e.done)
		e.srv.Serve(e.ln) //nolint:errcheck // ends with ErrServerClosed
	}()
	return e
}

// close waits up to grace for requests in flight, then cuts every
// connection, and waits for the server.
func (e *endpoint) close(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	e.srv.Shutdown(ctx) //nolint:errcheck // Close below
	e.srv.Close()       //nolint:errcheck // nothing to do
	<-e.done
}

func (e *endpoint) refuse(w http.ResponseWriter, req *http.Request, status int, msg string) {
	e.info.log.Warn("train: refused a program's request", "run", e.info.run, "attempt", e.r.attempt,
		"method", req.Method, "path", req.URL.Path, "remote", req.RemoteAddr, "status", status, "error", msg)
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

// admit checks a request's token, run and rank; it writes the refusal
// and returns false when one is wrong.
func (e *endpoint) admit(w http.ResponseWriter, req *http.Request, method, run string, rank *int) bool {
	if req.Method != method {
		w.Header().Set("Allow", method)
		e.refuse(w, req, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", req.Method, req.URL.Path, method))
		return false
	}
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(e.r.token)) != 1 {
		e.refuse(w, req, http.StatusUnauthorized, fmt.Sprintf("not a program of attempt %d of run %s: send the attempt's token, GORAY_TRAIN_TOKEN, as Authorization: Bearer <token>", e.r.attempt, e.info.run))
		return false
	}
	if run != e.info.run {
		e.refuse(w, req, http.StatusNotFound, fmt.Sprintf("no run %q here; this endpoint serves run %q (GORAY_TRAIN_RUN)", run, e.info.run))
		return false
	}
	if rank == nil {
		e.refuse(w, req, http.StatusBadRequest, "no rank: send the rank, GORAY_TRAIN_RANK")
		return false
	}
	if *rank < 0 || *rank >= e.r.world {
		e.refuse(w, req, http.StatusBadRequest, fmt.Sprintf("rank %d is not in 0..%d", *rank, e.r.world-1))
		return false
	}
	return true
}

func (e *endpoint) world(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	var rank *int
	if s := q.Get("rank"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			e.refuse(w, req, http.StatusBadRequest, fmt.Sprintf("rank %q is not a number", s))
			return
		}
		rank = &n
	}
	if !e.admit(w, req, http.MethodGet, q.Get("run"), rank) {
		return
	}
	reply := worldReply{Run: e.info.run, Attempt: e.r.attempt, Rank: *rank, WorldSize: e.r.world,
		SliceIndex: *rank / max(e.info.perSlice, 1), NumSlices: e.info.numSlices, Slices: e.r.slices, Storage: e.r.store.location()}
	if reply.Slices == nil {
		reply.Slices = []string{}
	}
	if ck := e.info.resume; ck != nil {
		reply.Iteration = ck.Iteration
		rr := &resumeReply{Iteration: ck.Iteration, Metrics: ck.Metrics, Ranks: ck.Ranks}
		for _, r := range []int{*rank, 0} {
			if slices.Contains(ck.Dirs, r) {
				rr.Dir = e.r.store.locate(e.r.store.rankKey(ck.Iteration, r))
				break
			}
		}
		reply.Checkpoint = rr
	}
	writeJSON(w, http.StatusOK, reply)
}

func (e *endpoint) report(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		e.admit(w, req, http.MethodPost, "", nil)
		return
	}
	var body reportRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxReportBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		status := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			status = http.StatusRequestEntityTooLarge
		}
		e.refuse(w, req, status, fmt.Sprintf("the body is not a report, {\"run\": ..., \"rank\": ..., \"metrics\": {name: number}, \"checkpoint_dir\": ...}: %v", err))
		return
	}
	if !e.admit(w, req, http.MethodPost, body.Run, body.Rank) {
		return
	}
	rank := *body.Rank
	e.mu.Lock()
	mu := e.ranks[rank]
	if mu == nil {
		mu = &sync.Mutex{}
		e.ranks[rank] = mu
	}
	e.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	e.mu.Lock()
	it, ok := e.iters[rank]
	if !ok && e.info.resume != nil {
		it = e.info.resume.Iteration
	}
	it++
	e.mu.Unlock()
	m := &ctrlMsg{Type: msgReport, Iteration: it, Metrics: body.Metrics}
	if body.CheckpointDir != "" {
		key, err := e.r.store.programDir(body.CheckpointDir)
		if err != nil {
			e.refuse(w, req, statusOf(err), fmt.Sprintf("iteration %d of rank %d: %v", it, rank, err))
			return
		}
		m.dir = key
	}
	if err := e.r.report(rank, m); err != nil {
		e.refuse(w, req, statusOf(err), fmt.Sprintf("iteration %d of rank %d: %v", it, rank, err))
		return
	}
	e.mu.Lock()
	e.iters[rank] = it
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, reportReply{Iteration: it, Checkpoint: m.dir != ""})
}

// statusOf maps an error's code to an HTTP status.
func statusOf(err error) int {
	switch ray.CodeOf(err) {
	case backend.InvalidArgument, backend.NotFound:
		return http.StatusBadRequest
	case backend.FailedPrecondition:
		return http.StatusConflict
	case backend.Unavailable, backend.DeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// connListener is a net.Listener of the connections the rendezvous hands
// over.
type connListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// push hands c to the server; false when it has closed.
func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

// bufConn is a connection whose first bytes were peeked into r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
