package train

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/samber/lo"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// rendezvous is the driver's end of one attempt: it admits the attempt's
// workers, tells them each other's addresses, stores their reports and
// checkpoints, relays program output, and on the first failure tells every
// worker which rank failed.
type rendezvous struct {
	ln      net.Listener
	token   string
	attempt int
	world   int
	store   *store
	slices  []string
	verdict time.Duration // grace for a peer's own failure report
	sink    *reportSink
	lines   *lineSink
	feed    *feeder // nil when the run has no datasets
	http    *endpoint
	// onCommit, if set before workers start, is called after each
	// complete checkpoint.
	onCommit func(iteration int)

	mu     sync.Mutex
	conns  map[int]*ctrlConn
	joins  map[int]uint64    // each rank's join request ID
	all    map[net.Conn]bool // every accepted connection, joined or not
	addrs  []string
	joined int
	left   []bool // the rank's loop returned successfully
	iters  map[int]*iterState
	fail   *failure
	failed chan struct{}
	timers []*time.Timer
	closed bool

	commitMu sync.Mutex
	wg       sync.WaitGroup
}

// failure is the first failure of an attempt. A weak one (a worker that
// saw its context cancelled) is replaced by a strong cause for the same
// rank, such as its task's error naming the dead host.
type failure struct {
	rank  int
	cause string
	err   error
	code  backend.Code // of cause, when err is nil
	weak  bool
	grow  bool // not a failure: the attempt stops to restart on more slices
}

type iterState struct {
	reported int
	ranks    []int
	dirs     []int // ranks whose data is a program's directory
	metrics  Metrics
	pos      map[string]*DatasetPosition
}

func newRendezvous(addr, token string, attempt, world int, st *store, sliceNames []string, verdict time.Duration, sink *reportSink, lines *lineSink, feed func(*sync.WaitGroup) *feeder, info runInfo) (*rendezvous, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, withCode(backend.Unavailable, fmt.Errorf("train: listen for workers on %s: %w", addr, err))
	}
	r := &rendezvous{ln: ln, token: token, attempt: attempt, world: world, store: st, slices: sliceNames, verdict: verdict,
		sink: sink, lines: lines, conns: map[int]*ctrlConn{}, joins: map[int]uint64{}, all: map[net.Conn]bool{}, addrs: make([]string, world), left: make([]bool, world),
		iters: map[int]*iterState{}, failed: make(chan struct{})}
	if feed != nil {
		r.feed = feed(&r.wg)
	}
	r.http = newEndpoint(r, info)
	r.wg.Go(r.accept)
	return r, nil
}

func (r *rendezvous) addr() string { return r.ln.Addr().String() }

func (r *rendezvous) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.all[c] = true
		r.mu.Unlock()
		r.wg.Go(func() { r.serveConn(c) })
	}
}

// serveConn handles one accepted connection: a worker's control
// connection, whose first byte is the '{' of its join message, or one of
// its shard connections.
func (r *rendezvous) serveConn(c net.Conn) {
	br := bufio.NewReader(c)
	if first, err := br.Peek(1); err == nil && first[0] >= 'A' && first[0] <= 'Z' {
		// An HTTP request of a program: the endpoint's server owns the
		// connection from here.
		r.mu.Lock()
		delete(r.all, c)
		r.mu.Unlock()
		if !r.http.ln.push(&bufConn{Conn: c, r: br}) {
			c.Close()
		}
		return
	}
	defer func() {
		r.mu.Lock()
		delete(r.all, c)
		r.mu.Unlock()
		c.Close()
	}()
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] != '{' {
		if r.feed != nil {
			r.feed.serve(c, br)
		}
		return
	}
	r.serve(newCtrlConnFrom(c, br))
}

// serve handles one worker's control connection.
func (r *rendezvous) serve(cc *ctrlConn) {
	defer cc.close()
	m, err := cc.recv()
	if err != nil {
		return
	}
	rank, err := r.join(cc, m)
	if err != nil {
		cc.send(&ctrlMsg{Type: msgError, ID: m.ID, Err: err.Error(), Code: int(backend.FailedPrecondition)}) //nolint:errcheck // the worker fails either way
		return
	}
	left := false
	for {
		m, err := cc.recv()
		if err != nil {
			if !left {
				r.setFailure(rank, fmt.Sprintf("its connection to the driver broke without a goodbye (%v): its process or host died", err), nil, backend.Unavailable, false)
			}
			return
		}
		switch m.Type {
		case msgReport:
			if err := r.report(rank, m); err != nil {
				cc.send(&ctrlMsg{Type: msgError, ID: m.ID, Err: err.Error(), Code: int(ray.CodeOf(err))}) //nolint:errcheck // see the reader
			} else {
				cc.send(&ctrlMsg{Type: msgAck, ID: m.ID}) //nolint:errcheck // see the reader
			}
		case msgLoad:
			data, err := r.store.read(context.Background(), m.Iteration, m.Rank)
			if err != nil {
				cc.send(&ctrlMsg{Type: msgError, ID: m.ID, Err: err.Error(), Code: int(ray.CodeOf(err))}) //nolint:errcheck // see the reader
			} else {
				cc.send(&ctrlMsg{Type: msgData, ID: m.ID, Data: data}) //nolint:errcheck // see the reader
			}
		case msgOutput:
			r.lines.write(rank, m.Line)
		case msgPeerLost:
			r.peerLost(rank, m.Peer, m.Err)
		case msgLeave:
			left = true
			if r.feed != nil {
				r.feed.leave(rank)
			}
			if m.Err == "" {
				r.mu.Lock()
				r.left[rank] = true
				r.mu.Unlock()
			} else {
				code := backend.TaskFailed // the loop's or program's own failure
				if m.Canceled {
					code = backend.Canceled
				}
				r.setFailure(rank, m.Err, nil, code, m.Canceled)
			}
		}
	}
}

func (r *rendezvous) join(cc *ctrlConn, m *ctrlMsg) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case m.Type != msgJoin || m.Token != r.token || m.Attempt != r.attempt:
		return 0, fmt.Errorf("train: not a worker of attempt %d of this run", r.attempt)
	case m.Rank < 0 || m.Rank >= r.world:
		return 0, fmt.Errorf("train: rank %d is not in 0..%d", m.Rank, r.world-1)
	case r.conns[m.Rank] != nil:
		return 0, fmt.Errorf("train: rank %d joined twice", m.Rank)
	case r.closed:
		return 0, fmt.Errorf("train: attempt %d has ended", r.attempt)
	}
	r.conns[m.Rank] = cc
	r.joins[m.Rank] = m.ID
	r.addrs[m.Rank] = m.Addr
	r.joined++
	if r.fail != nil {
		cc.send(&ctrlMsg{Type: msgAbort, Rank: r.fail.rank, Err: r.fail.cause}) //nolint:errcheck // it fails either way
	}
	if r.joined == r.world {
		for rank, c := range r.conns {
			c.send(&ctrlMsg{Type: msgPeers, ID: r.joins[rank], Addrs: r.addrs}) //nolint:errcheck // a broken connection shows up on its reader
		}
	}
	return m.Rank, nil
}

// report stores one rank's report and commits the iteration's checkpoint
// once every rank has reported it.
func (r *rendezvous) report(rank int, m *ctrlMsg) error {
	ctx := context.Background()
	if m.HasData {
		if err := r.store.writeRank(ctx, m.Iteration, rank, m.Data); err != nil {
			return err
		}
	}
	if m.dir != "" {
		if err := r.store.commitDir(ctx, m.Iteration, rank, m.dir); err != nil {
			return err
		}
	}
	if rank == 0 {
		r.sink.report(Report{Attempt: r.attempt, Iteration: m.Iteration, Metrics: m.Metrics, Slices: r.slices, Checkpoint: m.HasData || m.dir != "", Profilers: r.http.info.profilers})
	}
	r.mu.Lock()
	st := r.iters[m.Iteration]
	if st == nil {
		st = &iterState{}
		r.iters[m.Iteration] = st
	}
	st.reported++
	if m.HasData || m.dir != "" {
		st.ranks = append(st.ranks, rank)
	}
	if m.dir != "" {
		st.dirs = append(st.dirs, rank)
	}
	if rank == 0 {
		st.metrics = m.Metrics
	}
	for name, p := range m.Positions {
		if st.pos == nil {
			st.pos = map[string]*DatasetPosition{}
		}
		dp := st.pos[name]
		if dp == nil {
			dp = &DatasetPosition{Epochs: make([]int, r.world), Rows: make([]int64, r.world)}
			st.pos[name] = dp
		}
		dp.Epochs[rank], dp.Rows[rank] = p.Epoch, p.Rows
	}
	complete := st.reported == r.world && len(st.ranks) > 0 && r.fail == nil
	if st.reported == r.world {
		delete(r.iters, m.Iteration)
	}
	r.mu.Unlock()
	if !complete {
		return nil
	}
	slices.Sort(st.ranks)
	slices.Sort(st.dirs)
	r.commitMu.Lock()
	err := r.store.commit(ctx, &Checkpoint{Iteration: m.Iteration, Metrics: st.metrics, Ranks: st.ranks, Dirs: st.dirs, Attempt: r.attempt, Time: time.Now(), Datasets: st.pos})
	r.commitMu.Unlock()
	if err == nil && r.onCommit != nil {
		r.onCommit(m.Iteration)
	}
	return err
}

// peerLost: rank's connection to peer broke. If no failure is known yet,
// the peer's own report (or its task's error) is usually in flight; wait
// a little for it before naming the peer.
func (r *rendezvous) peerLost(rank, peer int, cause string) {
	r.mu.Lock()
	if r.fail != nil || r.closed {
		r.mu.Unlock()
		return
	}
	if peer >= 0 && peer < r.world && r.left[peer] {
		r.mu.Unlock()
		r.setFailure(peer, fmt.Sprintf("its loop returned while rank %d was still in a collective with it", rank), nil, backend.FailedPrecondition, false)
		return
	}
	r.timers = append(r.timers, time.AfterFunc(min(r.verdict/2, 2*time.Second), func() {
		r.setFailure(peer, fmt.Sprintf("rank %d lost its connection to it: %s", rank, cause), nil, backend.Unavailable, false)
	}))
	r.mu.Unlock()
}

// setFailure records rank's failure; the first one aborts every worker.
func (r *rendezvous) setFailure(rank int, cause string, err error, code backend.Code, weak bool) {
	r.mu.Lock()
	if f := r.fail; f != nil {
		switch {
		case f.rank != rank:
		case f.weak && !weak:
			f.cause, f.err, f.code, f.weak = cause, err, code, false
		case f.err == nil && err != nil && !errors.Is(err, ray.ErrPlacementGroupRemoved):
			f.err = err // the task's error of the failure the worker reported
		}
		r.mu.Unlock()
		return
	}
	r.fail = &failure{rank: rank, cause: cause, err: err, code: code, weak: weak}
	conns := lo.Values(r.conns)
	r.mu.Unlock()
	for _, c := range conns {
		c.send(&ctrlMsg{Type: msgAbort, Rank: rank, Err: cause}) //nolint:errcheck // a broken connection is a dead worker
	}
	close(r.failed)
}

// setGrow stops the attempt, unless it failed already, so that the run
// restarts on more slices; it is not a failure.
func (r *rendezvous) setGrow(cause string) {
	r.mu.Lock()
	if r.fail != nil {
		r.mu.Unlock()
		return
	}
	r.fail = &failure{rank: -1, cause: cause, code: backend.Canceled, grow: true}
	conns := lo.Values(r.conns)
	r.mu.Unlock()
	for _, c := range conns {
		c.send(&ctrlMsg{Type: msgAbort, Rank: -1, Err: cause}) //nolint:errcheck // a broken connection is a dead worker
	}
	close(r.failed)
}

// missing fails the attempt if some ranks have not joined yet, naming
// every one of them (the failure's rank is the first).
func (r *rendezvous) missing(after time.Duration) {
	r.mu.Lock()
	var ranks []int
	for i := range r.world {
		if r.conns[i] == nil {
			ranks = append(ranks, i)
		}
	}
	r.mu.Unlock()
	if len(ranks) == 0 {
		return
	}
	which := fmt.Sprintf("rank %d", ranks[0])
	if len(ranks) > 1 {
		which = "ranks " + rankList(ranks)
	}
	r.setFailure(ranks[0], fmt.Sprintf("%s of %d never joined the run's rendezvous within %v (RunConfig.StartTimeout): their tasks did not start, or could not reach the driver", which, r.world, after), nil, backend.DeadlineExceeded, false)
}

// rankList formats ranks as "0, 2, 5-9".
func rankList(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		} else {
			fmt.Fprintf(&b, "%d", ranks[i])
		}
		i = j + 1
	}
	return b.String()
}

func (r *rendezvous) failure() *failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail == nil {
		return nil
	}
	f := *r.fail
	return &f
}

// stopAccepting closes the listener: workers that have not joined yet
// cannot any more.
func (r *rendezvous) stopAccepting() {
	r.mu.Lock()
	r.closed = true
	for _, t := range r.timers {
		t.Stop()
	}
	r.mu.Unlock()
	r.ln.Close()
	if r.feed != nil {
		r.feed.stop()
	}
}

// wait waits up to d for every worker connection to end; it reports
// whether they all did.
func (r *rendezvous) wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// close stops admitting workers and waits up to grace for the connected
// ones to hang up, then cuts them off.
func (r *rendezvous) close(grace time.Duration) {
	r.stopAccepting()
	if r.feed != nil {
		defer r.feed.close()
	}
	defer r.http.close(grace)
	if r.wait(grace) {
		return
	}
	r.mu.Lock()
	conns := lo.Keys(r.all)
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

// lineSink writes external programs' output lines with a rank prefix.
type lineSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *lineSink) write(rank int, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "[rank %d] %s\n", rank, line)
}
