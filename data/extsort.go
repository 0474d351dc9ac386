package data

import (
	"cmp"
	"context"
	"io"
	"math"
	"reflect"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// extSorter is an external merge sort under a memory budget: rows are
// collected in memory until the next would pass the budget, then sorted
// (stably: each row is held with its index in the input, which breaks
// ties, so that pdqsort's slices.SortFunc does the sorting, not a stable
// merge sort, which is O(n log² n) in place) and spilled as a run, a spill file of gob-encoded chunks; at
// the end the runs, and the rows still in memory, are merged. More runs
// than can be merged at once (fanIn) are first merged into fewer. With a
// nil cmp it is a spool: rows come back in the order they were added.
//
// Memory: the rows collected are held up to the budget. Merging, each run
// being read holds one chunk and one read buffer, each at most a share of
// half the budget, and the rows left in memory when the input ended are
// kept there (not spilled) only when they fit in the other half.
type extSorter[E any] struct {
	ctx    context.Context
	o      *opState
	area   *spillArea
	cmp    func(a, b E) int
	size   sizer[E]
	budget int64
	fanIn  int
	share  int64 // bytes of one chunk, and of one I/O buffer

	// sortBuf, when set, sorts the rows held as cmp and then their index
	// order them, without calling cmp (a direct comparison of keys). It
	// either sorts them in place and returns nil, or leaves them and
	// returns their order (row j of the result is rows[perm[j].i]).
	sortBuf func([]ranked[E]) []radixItem
	// key, when set, maps a row to a uint64 whose order is cmp's (see
	// radixKeyOf): the merge compares those instead of calling cmp.
	key      func(e *E) uint64
	buf      []ranked[E]
	bufBytes int64
	runs     []*spillFile
	checked  bool
	n        int64 // rows added
}

func newExtSorter[E any](ctx context.Context, o *opState, area *spillArea, budget int64, cmp func(a, b E) int) *extSorter[E] {
	fanIn := int(min(max(budget/(32<<10), 8), 128))
	return &extSorter[E]{
		ctx: ctx, o: o, area: area, cmp: cmp, size: newSizer[E](), budget: budget,
		fanIn: fanIn, share: max(budget/int64(4*(fanIn+1)), 512),
	}
}

// ranked is a row held by an extSorter and its index in the input.
type ranked[E any] struct {
	e E
	i int64
}

// add takes one row, spilling what is held first if it would pass the
// budget.
func (s *extSorter[E]) add(e E) error {
	sz := s.size.val(e) // the index is not counted: 8 bytes a row
	if len(s.buf) > 0 && s.bufBytes+sz > s.budget {
		if err := s.spill(); err != nil {
			return err
		}
	}
	if len(s.buf) == cap(s.buf) && len(s.buf) >= 1024 {
		// Double, where append grows large slices by a quarter: fewer
		// copies of what is held.
		s.buf = slices.Grow(s.buf, len(s.buf))
	}
	s.buf = append(s.buf, ranked[E]{e, s.n})
	s.bufBytes += sz
	s.n++
	s.o.mem.hold(1, sz)
	return nil
}

// sortHeld sorts the rows held, stably (ties in input order): in place
// (perm nil), or into the order perm gives (row j is s.buf[perm[j].i]).
func (s *extSorter[E]) sortHeld() (perm []radixItem) {
	if s.cmp == nil {
		return nil // a spool: rows are in input order
	}
	if s.sortBuf != nil {
		return s.sortBuf(s.buf)
	}
	c := s.cmp
	slices.SortFunc(s.buf, func(a, b ranked[E]) int {
		if r := c(a.e, b.e); r != 0 {
			return r
		}
		return cmp.Compare(a.i, b.i)
	})
	return nil
}

// spill sorts the rows held and writes them as a run.
func (s *extSorter[E]) spill() error {
	at := func(i int) *E { return &s.buf[i].e }
	if perm := s.sortHeld(); perm != nil {
		at = func(i int) *E { return &s.buf[perm[i].i].e }
	}
	err := s.writeRun(len(s.buf), at)
	if err != nil {
		return err
	}
	clear(s.buf)
	s.buf = s.buf[:0]
	s.o.mem.free(0, s.bufBytes) // the rows were freed by writeRun
	s.bufBytes = 0
	return nil
}

// spillSorted writes rows, already in order, as a run and lets them go.
// bytes is what they hold in the accounts.
func (s *extSorter[E]) spillSorted(rows []E, bytes int64) error {
	if err := s.writeRun(len(rows), func(i int) *E { return &rows[i] }); err != nil {
		return err
	}
	s.o.mem.free(0, bytes)
	return nil
}

// writeRun writes n rows, already in order (row i at at(i)), as a run,
// and frees them from the row count of the accounts (the caller frees
// their bytes).
func (s *extSorter[E]) writeRun(n int, at func(i int) *E) error {
	if !s.checked {
		s.checked = true
		if err := spillable(reflect.TypeFor[E]()); err != nil {
			return backend.Errorf(backend.InvalidArgument, "", "data: %s: the rows held passed MemoryBudget(%d) and must be spilled, but %w; export it, make the type implement encoding.BinaryMarshaler, or raise MemoryBudget", s.o.name, s.budget, err)
		}
	}
	w, err := newRunWriter[E](s.ctx, s.area, int(min(s.share, 64<<10)))
	if err != nil {
		return err
	}
	var out []E
	for i := 0; i < n; {
		out = out[:0]
		var b int64
		for i < n && (len(out) == 0 || b+s.size.of(at(i)) <= s.share) {
			b += s.size.of(at(i))
			out = append(out, *at(i))
			i++
		}
		if err := w.write(out, b); err != nil {
			w.w.Close()
			return err
		}
		clear(out)
	}
	f, err := w.close()
	if err != nil {
		return err
	}
	s.runs = append(s.runs, f)
	s.o.mem.free(int64(f.rows), 0)
	return nil
}

// source is one sorted input of a merge.
type source[E any] interface {
	// next advances to the next row; false at the end.
	next() (E, bool, error)
	close() error
}

// memSource reads rows held in memory, in order (rows[perm[i].i] when
// perm is set), freeing them from the accounts as it goes. It copies them
// out a chunk at a time: a tight loop of loads that do not depend on each
// other, which the CPU overlaps (a sorted order's rows are all over
// memory).
type memSource[E any] struct {
	s     *extSorter[E]
	rows  []ranked[E]
	perm  []radixItem
	i     int // rows copied out
	chunk []E
	ci    int
}

const memChunk = 512

func (m *memSource[E]) next() (E, bool, error) {
	if m.ci >= len(m.chunk) {
		if m.i >= len(m.rows) {
			var zero E
			return zero, false, nil
		}
		m.fill()
	}
	e := m.chunk[m.ci]
	m.ci++
	return e, true, nil
}

// fill copies the next chunk of rows out and frees them.
func (m *memSource[E]) fill() {
	n := min(memChunk, len(m.rows)-m.i)
	if m.chunk == nil {
		m.chunk = make([]E, 0, min(memChunk, len(m.rows)))
	}
	clear(m.chunk)
	m.chunk, m.ci = m.chunk[:n], 0
	flat := m.s.size.flat > 0
	var bytes int64
	for k := range n {
		j := m.i + k
		if m.perm != nil {
			j = int(m.perm[j].i)
		}
		r := &m.rows[j]
		m.chunk[k] = r.e
		if !flat {
			bytes += m.s.size.of(&r.e)
			*r = ranked[E]{} // let what it points to go
		}
	}
	if flat {
		bytes = int64(n) * m.s.size.flat
	}
	m.i += n
	m.s.o.mem.free(int64(n), bytes)
}

func (m *memSource[E]) close() error {
	for i := m.i; i < len(m.rows); i++ {
		j := i
		if m.perm != nil {
			j = int(m.perm[j].i)
		}
		m.s.o.mem.free(1, m.s.size.of(&m.rows[j].e))
	}
	m.rows, m.perm, m.chunk = nil, nil, nil
	return nil
}

// runSource reads a run back one chunk at a time.
type runSource[E any] struct {
	s     *extSorter[E]
	r     *runReader[E]
	c     chunk[E]
	i     int
	held  bool
	ioBuf int64
}

func (s *extSorter[E]) open(f *spillFile) (*runSource[E], error) {
	io := min(s.share, 64<<10)
	r, err := openRun[E](s.ctx, f, int(io))
	if err != nil {
		return nil, err
	}
	s.o.mem.hold(0, io)
	return &runSource[E]{s: s, r: r, ioBuf: io}, nil
}

func (f *runSource[E]) next() (E, bool, error) {
	var zero E
	for f.i >= len(f.c.Rows) {
		f.release()
		c, err := f.r.next()
		if err == io.EOF {
			return zero, false, nil
		}
		if err != nil {
			return zero, false, err
		}
		f.c, f.i, f.held = c, 0, true
		f.s.o.mem.hold(int64(len(c.Rows)), c.Bytes)
	}
	e := f.c.Rows[f.i]
	f.c.Rows[f.i] = zero
	f.i++
	return e, true, nil
}

func (f *runSource[E]) release() {
	if f.held {
		f.s.o.mem.free(int64(len(f.c.Rows)), f.c.Bytes)
		f.held = false
	}
	f.c = chunk[E]{}
}

func (f *runSource[E]) close() error {
	f.release()
	if f.ioBuf > 0 {
		f.s.o.mem.free(0, f.ioBuf)
		f.ioBuf = 0
	}
	return f.r.close(f.s.ctx)
}

// merger merges sorted sources; ties go to the earlier source, so a merge
// of runs in input order is stable. With key set, it compares each head's
// mapped key (one call per row, not one per comparison).
type merger[E any] struct {
	cmp   func(a, b E) int
	key   func(e *E) uint64
	srcs  []source[E]
	heads []E
	heap  []int // indexes of sources with a head, a binary min-heap
	// kheap, with key set, is heap with each head's key beside its
	// source, so that a comparison reads no more than the heap.
	kheap []keyHead
}

// keyHead is a source's head in a merger's kheap: its mapped key, and
// the source's index, which breaks ties.
type keyHead struct {
	k uint64
	i int
}

func (a keyHead) before(b keyHead) bool { return a.k < b.k || (a.k == b.k && a.i < b.i) }

func newMerger[E any](cmp func(a, b E) int, key func(e *E) uint64, srcs []source[E]) (*merger[E], error) {
	m := &merger[E]{cmp: cmp, key: key, srcs: srcs, heads: make([]E, len(srcs))}
	for i, s := range srcs {
		e, ok, err := s.next()
		if err != nil {
			return nil, err
		}
		if ok {
			m.heads[i] = e
			if key != nil {
				m.kheap = append(m.kheap, keyHead{key(&m.heads[i]), i})
			} else {
				m.heap = append(m.heap, i)
			}
		}
	}
	for i := len(m.kheap)/2 - 1; i >= 0; i-- {
		m.downKeyed(i)
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m, nil
}

func (m *merger[E]) less(a, b int) bool {
	if m.cmp == nil {
		return a < b
	}
	if c := m.cmp(m.heads[a], m.heads[b]); c != 0 {
		return c < 0
	}
	return a < b
}

func (m *merger[E]) down(i int) {
	h := m.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && m.less(h[r], h[l]) {
			j = r
		}
		if !m.less(h[j], h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

// downKeyed is down for kheap.
func (m *merger[E]) downKeyed(i int) {
	h := m.kheap
	x := h[i]
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		j := l
		if r := l + 1; r < len(h) && h[r].before(h[l]) {
			j = r
		}
		if !h[j].before(x) {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = x
}

func (m *merger[E]) next() (E, bool, error) {
	if m.key != nil {
		return m.nextKeyed()
	}
	var zero E
	if len(m.heap) == 0 {
		return zero, false, nil
	}
	i := m.heap[0]
	e := m.heads[i]
	n, ok, err := m.srcs[i].next()
	if err != nil {
		return zero, false, err
	}
	if ok {
		m.heads[i] = n
	} else {
		m.heads[i] = zero
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	if len(m.heap) > 0 {
		m.down(0)
	}
	return e, true, nil
}

// nextKeyed is next with key set.
func (m *merger[E]) nextKeyed() (E, bool, error) {
	var zero E
	if len(m.kheap) == 0 {
		return zero, false, nil
	}
	i := m.kheap[0].i
	e := m.heads[i]
	n, ok, err := m.srcs[i].next()
	if err != nil {
		return zero, false, err
	}
	if ok {
		m.heads[i] = n
		m.kheap[0].k = m.key(&m.heads[i])
	} else {
		m.heads[i] = zero
		last := len(m.kheap) - 1
		m.kheap[0] = m.kheap[last]
		m.kheap = m.kheap[:last]
	}
	if len(m.kheap) > 0 {
		m.downKeyed(0)
	}
	return e, true, nil
}

func (m *merger[E]) close() error {
	var first error
	for _, s := range m.srcs {
		if err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sorted ends the input and returns the rows in order, as a source to
// pull from; the caller closes it.
func (s *extSorter[E]) sorted() (source[E], error) {
	if len(s.runs) == 0 {
		perm := s.sortHeld()
		rows := s.buf
		s.buf = nil
		return &memSource[E]{s: s, rows: rows, perm: perm}, nil
	}
	// Merging needs the other half of the budget: keep the rows held
	// only if they fit in half.
	if s.bufBytes > s.budget/2 {
		if err := s.spill(); err != nil {
			return nil, err
		}
	}
	for len(s.runs) > s.fanIn {
		if err := s.mergeRuns(); err != nil {
			return nil, err
		}
	}
	srcs := make([]source[E], 0, len(s.runs)+1)
	fail := func(err error) (source[E], error) {
		for _, src := range srcs {
			src.close()
		}
		return nil, err
	}
	for _, f := range s.runs {
		src, err := s.open(f)
		if err != nil {
			return fail(err)
		}
		srcs = append(srcs, src)
	}
	s.runs = nil
	if len(s.buf) > 0 {
		perm := s.sortHeld()
		srcs = append(srcs, &memSource[E]{s: s, rows: s.buf, perm: perm})
		s.buf = nil
	}
	m, err := newMerger(s.cmp, s.key, srcs)
	if err != nil {
		return fail(err)
	}
	return m, nil
}

// mergeRuns merges the first fanIn runs into one, which takes their place
// (so runs stay in input order, and the merge stable).
func (s *extSorter[E]) mergeRuns() error {
	s.o.mem.mergePasses.Add(1)
	srcs := make([]source[E], 0, s.fanIn)
	defer func() {
		for _, src := range srcs {
			src.close()
		}
	}()
	for _, f := range s.runs[:s.fanIn] {
		src, err := s.open(f)
		if err != nil {
			return err
		}
		srcs = append(srcs, src)
	}
	m, err := newMerger(s.cmp, s.key, srcs)
	if err != nil {
		return err
	}
	w, err := newRunWriter[E](s.ctx, s.area, int(min(s.share, 64<<10)))
	if err != nil {
		return err
	}
	var out []E
	var b int64
	flush := func() error {
		err := w.write(out, b)
		s.o.mem.free(int64(len(out)), b)
		clear(out)
		out, b = out[:0], 0
		return err
	}
	for {
		e, ok, err := m.next()
		if err != nil {
			w.w.Close()
			return err
		}
		if !ok {
			break
		}
		sz := s.size.val(e)
		if len(out) > 0 && b+sz > s.share {
			if err := flush(); err != nil {
				w.w.Close()
				return err
			}
		}
		out = append(out, e)
		b += sz
		s.o.mem.hold(1, sz)
	}
	if err := flush(); err != nil {
		w.w.Close()
		return err
	}
	f, err := w.close()
	if err != nil {
		return err
	}
	s.o.mem.spilledRows.Add(-f.rows) // the same rows, spilled again: count them once
	s.runs = append([]*spillFile{f}, s.runs[s.fanIn:]...)
	return nil
}

// sortKeyedRows sorts rows held by key (cmp.Compare's order, reversed
// when desc), ties in input order: the sortBuf of keyed sorts. Integer and
// floating-point keys are radix sorted; others (strings) by pdqsort with
// the input index breaking ties.
func sortKeyedRows[K cmp.Ordered, V any](desc bool) func([]ranked[keyed[K, V]]) []radixItem {
	if rk := radixKeyOf[K](desc); rk != nil {
		return func(rows []ranked[keyed[K, V]]) []radixItem {
			if len(rows) > math.MaxUint32 {
				sortKeyedPdq(desc, rows)
				return nil
			}
			return radixPerm(rows, func(e *keyed[K, V]) uint64 { return rk(&e.K) })
		}
	}
	return func(rows []ranked[keyed[K, V]]) []radixItem {
		sortKeyedPdq(desc, rows)
		return nil
	}
}

// sortKeyedPdq is sortKeyedRows by pdqsort.
func sortKeyedPdq[K cmp.Ordered, V any](desc bool, rows []ranked[keyed[K, V]]) {
	if desc {
		slices.SortFunc(rows, func(a, b ranked[keyed[K, V]]) int {
			if c := cmp.Compare(b.e.K, a.e.K); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
		return
	}
	slices.SortFunc(rows, func(a, b ranked[keyed[K, V]]) int {
		if c := cmp.Compare(a.e.K, b.e.K); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
}

// newKeyedSorter is an extSorter of rows with a key, by key.
func newKeyedSorter[K cmp.Ordered, V any](ctx context.Context, o *opState, area *spillArea, budget int64, desc bool) *extSorter[keyed[K, V]] {
	s := newExtSorter(ctx, o, area, budget, byKey[K, V](desc))
	s.sortBuf = sortKeyedRows[K, V](desc)
	if rk := radixKeyOf[K](desc); rk != nil {
		s.key = func(e *keyed[K, V]) uint64 { return rk(&e.K) }
	}
	return s
}
