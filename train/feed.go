package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/goray-dev/goray/data"
)

// The driver feeds each worker its shard of every dataset of the run.
// Train workers run in worker processes or pods, where the driver's
// *data.Dataset (a plan of Go closures) cannot go, so the dataset runs in
// the driver, once per epoch, split into one shard per rank
// (data.Split), and each worker reads its shard over a connection of its
// own to the attempt's rendezvous (a shard connection):
//
//	worker: opShardOpen {token, attempt, rank, dataset, epoch, row type, window}
//	driver: opShardRows [a []T, gob] ... opShardEnd [error or empty]
//	worker: opShardCredit after each rows frame it consumed
//
// The driver sends a rows frame only against a credit, and the worker
// grants one per frame it has consumed, so at most window frames (2: the
// one it consumes and the next) are on their way to a worker. A worker that reads
// slowly thus holds its shard's rows in the driver, where data.Split
// bounds them, and the dealing stops (holding the other workers back)
// rather than buffering without bound.

// epochRun is one epoch of a dataset, running in the driver.
type epochRun interface {
	// serve sends rank's shard on fc, after skipping its first skip rows;
	// it returns when the shard has ended or the connection is gone.
	serve(ctx context.Context, rank int, skip int64, fc *feedConn) error
	// drop gives up rank's shard: nobody will read it.
	drop(rank int)
	// close ends the run and waits for it.
	close() error
}

// feeder is an attempt's datasets, in the driver.
type feeder struct {
	ctx     context.Context
	cancel  context.CancelFunc
	token   string
	attempt int
	world   int
	sets    Datasets
	start   map[string][]shardPos // each rank's resumed position in each dataset
	wg      *sync.WaitGroup       // the rendezvous's: close waits for every goroutine

	mu     sync.Mutex
	feeds  map[feedKey]*epochFeed
	left   []bool // the rank's loop returned: it reads nothing more
	closed bool
}

type feedKey struct {
	name  string
	epoch int
}

// epochFeed is one epoch of one dataset: the run (once ready) and which
// ranks have claimed their shards.
type epochFeed struct {
	ready   chan struct{}
	run     epochRun
	err     error
	skip    []int64 // rows of each shard to skip in the driver
	claimed []bool  // served or dropped
	ended   int     // shards served or dropped to the end: at world, the run is closed
}

func newFeeder(ctx context.Context, token string, attempt, world int, sets Datasets, start map[string][]shardPos, wg *sync.WaitGroup) *feeder {
	ctx, cancel := context.WithCancel(ctx)
	return &feeder{ctx: ctx, cancel: cancel, token: token, attempt: attempt, world: world, sets: sets, start: start, wg: wg,
		feeds: map[feedKey]*epochFeed{}, left: make([]bool, world)}
}

// plan says, for epoch of dataset name, how many rows to skip before the
// split (whole rounds every rank has consumed), how many of each shard to
// skip after it, and which ranks read nothing (they resumed in a later
// epoch). A rank that resumed at (E, k) skips k rows of epoch E and reads
// later epochs whole.
func (f *feeder) plan(name string, epoch int) (global int64, skip []int64, gone []bool) {
	start := f.start[name]
	skip, gone = make([]int64, f.world), make([]bool, f.world)
	m := int64(-1)
	for r, p := range start {
		switch {
		case epoch < p.Epoch:
			gone[r] = true
			continue
		case epoch == p.Epoch:
			skip[r] = p.Rows
		}
		if m < 0 || skip[r] < m {
			m = skip[r]
		}
	}
	if m <= 0 {
		return 0, skip, gone
	}
	for r := range skip {
		if !gone[r] {
			skip[r] -= m
		}
	}
	return m * int64(f.world), skip, gone
}

// feed returns epoch's feed of dataset name, starting its run if this is
// the first request for it.
func (f *feeder) feed(name string, epoch int) (*epochFeed, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, fmt.Errorf("train: attempt %d has ended", f.attempt)
	}
	key := feedKey{name, epoch}
	if ef := f.feeds[key]; ef != nil {
		f.mu.Unlock()
		select {
		case <-ef.ready:
			return ef, ef.err
		case <-f.ctx.Done():
			return nil, fmt.Errorf("train: attempt %d has ended", f.attempt)
		}
	}
	global, skip, gone := f.plan(name, epoch)
	ef := &epochFeed{ready: make(chan struct{}), skip: skip, claimed: gone}
	f.feeds[key] = ef
	f.mu.Unlock()

	ef.run, ef.err = f.sets[name].open(f.ctx, name, epoch, global, f.world)
	f.mu.Lock()
	defer f.mu.Unlock()
	if ef.err == nil {
		for r := range f.world {
			if gone[r] || (f.left[r] && !ef.claimed[r]) {
				ef.claimed[r] = true
				f.dropLocked(ef, r)
			}
		}
	}
	close(ef.ready) // under mu: leave sees the feed either not ready or with its drops done
	return ef, ef.err
}

func (f *feeder) dropLocked(ef *epochFeed, rank int) {
	f.wg.Go(func() {
		ef.run.drop(rank)
		f.shardEnded(ef)
	})
}

// shardEnded counts a shard that nobody reads any more; once every shard
// is, the epoch's run is ended rather than left reading its source for
// nobody.
func (f *feeder) shardEnded(ef *epochFeed) {
	f.mu.Lock()
	ef.ended++
	last := ef.ended == f.world
	f.mu.Unlock()
	if last {
		ef.run.close() //nolint:errcheck // every shard has ended: nobody needs the run's error
	}
}

// leave: rank's loop returned; its shards of every epoch, started or not,
// are dropped.
func (f *feeder) leave(rank int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rank < 0 || rank >= f.world || f.closed {
		return
	}
	f.left[rank] = true
	for _, ef := range f.feeds {
		select {
		case <-ef.ready:
		default:
			continue // dropped when ready
		}
		if ef.err == nil && !ef.claimed[rank] {
			ef.claimed[rank] = true
			f.dropLocked(ef, rank)
		}
	}
}

// serve handles a shard connection whose first byte br has peeked; the
// rendezvous closes it afterwards.
func (f *feeder) serve(c net.Conn, br *bufio.Reader) {
	fc := &feedConn{c: c, br: br, wg: f.wg}
	c.SetReadDeadline(time.Now().Add(rendezvousDialTimeout)) //nolint:errcheck // a broken connection fails the read
	op, payload, err := readFrame(br, 1<<20)
	if err != nil || op != opShardOpen {
		return // not a worker of this run
	}
	c.SetReadDeadline(time.Time{}) //nolint:errcheck // as above
	var req shardOpen
	if err := json.Unmarshal(payload, &req); err != nil {
		return
	}
	ef, rank, skip, err := f.claim(&req)
	if err != nil {
		fc.end(err) //nolint:errcheck // the worker fails either way
		return
	}
	fc.window = max(req.Window, 1)
	defer f.shardEnded(ef)
	if err := ef.run.serve(f.ctx, rank, skip, fc); err != nil {
		fc.end(err) //nolint:errcheck // the worker fails either way
	}
}

// claim checks a shard request and claims the rank's shard of the epoch.
func (f *feeder) claim(req *shardOpen) (*epochFeed, int, int64, error) {
	switch {
	case req.Token != f.token || req.Attempt != f.attempt:
		return nil, 0, 0, fmt.Errorf("train: not a worker of attempt %d of this run", f.attempt)
	case req.Rank < 0 || req.Rank >= f.world:
		return nil, 0, 0, fmt.Errorf("train: rank %d is not in 0..%d", req.Rank, f.world-1)
	}
	d := f.sets[req.Dataset]
	if d == nil {
		return nil, 0, 0, fmt.Errorf("train: the run has no dataset %q; its datasets: %s", req.Dataset, datasetNames(f.sets))
	}
	if d.rowType() != req.RowType {
		return nil, 0, 0, fmt.Errorf("train: dataset %q has rows of type %s, not %s", req.Dataset, d.rowType(), req.RowType)
	}
	if start := f.start[req.Dataset][req.Rank].Epoch; req.Epoch < start {
		return nil, 0, 0, fmt.Errorf("train: rank %d resumed dataset %q at epoch %d; it cannot read epoch %d", req.Rank, req.Dataset, start, req.Epoch)
	}
	ef, err := f.feed(req.Dataset, req.Epoch)
	if err != nil {
		return nil, 0, 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ef.claimed[req.Rank] {
		return nil, 0, 0, fmt.Errorf("train: rank %d has already read epoch %d of dataset %q in this attempt", req.Rank, req.Epoch, req.Dataset)
	}
	ef.claimed[req.Rank] = true
	return ef, req.Rank, ef.skip[req.Rank], nil
}

// stop ends every epoch's run: the attempt is over.
func (f *feeder) stop() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
}

// close waits for every epoch's run to end; call it after stop and once
// the goroutines of the rendezvous are done.
func (f *feeder) close() {
	f.mu.Lock()
	feeds := make([]*epochFeed, 0, len(f.feeds))
	for _, ef := range f.feeds {
		feeds = append(feeds, ef)
	}
	f.mu.Unlock()
	for _, ef := range feeds {
		<-ef.ready
		if ef.run != nil {
			ef.run.close() //nolint:errcheck // cancelled: the run's error says nothing new
		}
	}
}

// feedConn is the driver's end of a shard connection: it writes rows
// frames against the worker's credits, which a reader goroutine collects.
type feedConn struct {
	c      net.Conn
	br     *bufio.Reader
	wg     *sync.WaitGroup
	window int
}

// credits starts the reader of the worker's credits; gone is closed when
// the connection breaks or the worker hangs up (it broke out of its range,
// or its loop ended).
func (fc *feedConn) credits() (credits <-chan struct{}, gone <-chan struct{}) {
	ch, g := make(chan struct{}, fc.window+1), make(chan struct{})
	fc.wg.Go(func() {
		defer close(g)
		for {
			op, _, err := readFrame(fc.br, 0)
			if err != nil || op != opShardCredit {
				return
			}
			select {
			case ch <- struct{}{}:
			default: // more credits than frames sent: a confused worker
				return
			}
		}
	})
	return ch, g
}

func (fc *feedConn) end(err error) error {
	var msg []byte
	if err != nil {
		msg = []byte(err.Error())
	}
	return writeFrame(fc.c, opShardEnd, 0, msg)
}

// A rows frame holds up to frameRows rows and about frameBytes bytes. The
// driver sends a frame before it is full only when the worker has
// consumed every frame sent (it holds all its credits): a worker that
// waits gets rows at once, and one that is busy gets full frames, which
// cost it fewer reads and decodes.
const (
	frameRows  = 256
	frameBytes = 1 << 20
)

// mailbox holds the rows taken from a shard for the frames to come: at
// most limit rows, so that a worker without credit holds the shard in
// data.Split, where its rows in flight are bounded.
type mailbox[T any] struct {
	mu    sync.Mutex
	rows  []T
	limit int  // rows per frame, adapted to the rows' encoded size
	done  bool // the shard has ended (err says how)
	err   error
	// ready wakes serve when rows arrive in an empty mailbox, when it
	// fills up, and at the end; space wakes the pump when serve takes.
	ready, space chan struct{}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// put adds a row, waiting while the mailbox is full; false when stop
// closed.
func (m *mailbox[T]) put(row T, stop <-chan struct{}) bool {
	m.mu.Lock()
	for len(m.rows) >= m.limit {
		m.mu.Unlock()
		select {
		case <-m.space:
		case <-stop:
			return false
		}
		m.mu.Lock()
	}
	m.rows = append(m.rows, row)
	n, limit := len(m.rows), m.limit
	m.mu.Unlock()
	if n == 1 || n >= limit {
		signal(m.ready)
	}
	return true
}

func (m *mailbox[T]) finish(err error) {
	m.mu.Lock()
	m.done, m.err = true, err
	m.mu.Unlock()
	signal(m.ready)
}

// state reports the rows held, whether they fill a frame, and whether
// the shard has ended.
func (m *mailbox[T]) state() (n int, full, done bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows), len(m.rows) >= m.limit, m.done, m.err
}

// take removes up to a frame's rows into out.
func (m *mailbox[T]) take(out []T) []T {
	m.mu.Lock()
	k := min(len(m.rows), m.limit)
	out = append(out[:0], m.rows[:k]...)
	m.rows = m.rows[:copy(m.rows, m.rows[k:])]
	m.mu.Unlock()
	signal(m.space)
	return out
}

// adapt sets the rows per frame from the encoded size of the last frame.
func (m *mailbox[T]) adapt(rows, bytes int) {
	if rows == 0 {
		return
	}
	per := max(1, bytes/rows)
	m.mu.Lock()
	m.limit = max(1, min(frameRows, frameBytes/per))
	m.mu.Unlock()
	signal(m.space)
}

// splitRun is an epoch of a dataset of rows of type T, split into one
// shard per rank.
type splitRun[T any] struct {
	s     *data.Shards[T]
	name  string
	epoch int
}

func (r *splitRun[T]) serve(ctx context.Context, rank int, skip int64, fc *feedConn) error {
	credits, gone := fc.credits()
	// A write to a worker that does not read blocks; the end of the
	// attempt unblocks it.
	defer context.AfterFunc(ctx, func() { fc.c.Close() })()
	mb := &mailbox[T]{limit: 16, ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	stop := make(chan struct{})
	defer close(stop)
	fc.wg.Go(func() {
		for row, err := range r.s.Shard(rank) {
			if err != nil {
				mb.finish(fmt.Errorf("train: dataset %q epoch %d: %w", r.name, r.epoch, err))
				return
			}
			if skip > 0 { // consumed before the run resumed
				skip--
				continue
			}
			if !mb.put(row, stop) {
				return // breaking out gives up the rest of the shard
			}
		}
		mb.finish(nil)
	})
	have := fc.window
	var rows []T
	// One gob stream per connection: the rows' type is described in the
	// first frame only.
	var frame bytes.Buffer
	enc := gob.NewEncoder(&frame)
	for {
		n, full, done, err := mb.state()
		switch {
		case n == 0 && done:
			if fc.end(err) == nil {
				// Close only once the worker has read the end and hung up:
				// closing with its credits still coming would reset the
				// connection, which may discard the end before it is read.
				t := time.NewTimer(rendezvousDialTimeout)
				defer t.Stop()
				select {
				case <-gone:
				case <-t.C:
				case <-ctx.Done():
				}
			}
			return nil
		case n > 0 && have > 0 && (full || done || have == fc.window):
			rows = mb.take(rows)
			frame.Reset()
			if err := enc.Encode(rows); err != nil {
				return fmt.Errorf("train: dataset %q epoch %d: encode rows of type %s with encoding/gob: %w", r.name, r.epoch, rowTypeOf[T](), err)
			}
			mb.adapt(len(rows), frame.Len())
			clear(rows)
			if err := writeFrame(fc.c, opShardRows, 0, frame.Bytes()); err != nil {
				return nil // the worker went away
			}
			have--
			continue
		}
		select {
		case <-mb.ready:
		case <-credits:
			have++
		case <-gone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *splitRun[T]) drop(rank int) {
	for range r.s.Shard(rank) {
		break
	}
}

func (r *splitRun[T]) close() error { return r.s.Close() }
