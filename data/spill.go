package data

import (
	"bufio"
	"context"
	"encoding"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goray-dev/goray/storage"
)

// DefaultMemoryBudget is the [MemoryBudget] of an all-to-all operator
// unless told otherwise: 256 MiB.
const DefaultMemoryBudget = 256 << 20

// MinMemoryBudget is the smallest [MemoryBudget]: 64 KiB.
const MinMemoryBudget = 64 << 10

// MemoryBudget caps the estimated bytes of rows that an all-to-all
// operator ([Sort], [SortBy], [GroupBy], [MapGroups], [Join], [LeftJoin],
// [RandomShuffle], [Repartition]) holds in memory: the rows it is
// collecting, the aggregation states of its groups, and the rows it reads
// back from spill files to merge them. Beyond it the operator spills to
// files (see [SpillTo]) and merges them back, so a dataset of any size
// goes through a fixed budget. Sizes are estimated as for
// [MaxBytesInFlight] (a row of fixed size, such as an int or a struct of
// numbers, costs nothing to size); a single row larger than the budget is
// held alone. The rows an operator has handed on and the next one has not
// taken are bounded by [MaxRowsInFlight] as for every operator, not by
// the budget. Given to a sink, it is the default of every all-to-all
// operator of the run; given to one, it is that operator's. n must be at
// least [MinMemoryBudget] (64 KiB); the default is [DefaultMemoryBudget]
// (256 MiB) per operator.
func MemoryBudget(n int64) Option {
	return optionFunc(func(c *config) {
		if n < MinMemoryBudget {
			invalid(c, "MemoryBudget(%d): must be at least MinMemoryBudget (%d bytes, 64 KiB)", n, MinMemoryBudget)
			return
		}
		c.memBudget = n
	})
}

// SpillTo makes all-to-all operators spill to bucket b, under a prefix of
// their own ("goray-spill-" and a random suffix), instead of a temporary
// directory of the local disk (os.MkdirTemp). The operator deletes every
// file it wrote by the end of the run, on success, failure and
// cancellation alike; b itself is the caller's to close. Spill files are
// written with encoding/gob (see [Sort] for what that means for row
// types). Given to a sink, it applies to every all-to-all operator of the
// run; given to one, to that operator. b must not be nil.
func SpillTo(b storage.Bucket) Option {
	return optionFunc(func(c *config) {
		if b == nil {
			invalid(c, "SpillTo(nil): pass a storage.Bucket, such as storage.Dir(dir) or storage.NewMem()")
			return
		}
		c.spill = b
	})
}

// memStats counts what an all-to-all operator holds and spills.
type memStats struct {
	budget                    int64
	bytes, rows               atomic.Int64
	peakBytes, peakRows       atomic.Int64
	spilledRows, spilledBytes atomic.Int64
	spillFiles, mergePasses   atomic.Int64
}

func (m *memStats) hold(rows, bytes int64) {
	maxAtomic(&m.peakBytes, m.bytes.Add(bytes))
	maxAtomic(&m.peakRows, m.rows.Add(rows))
}

func (m *memStats) free(rows, bytes int64) {
	m.bytes.Add(-bytes)
	m.rows.Add(-rows)
}

func (m *memStats) snapshot() MemoryStats {
	return MemoryStats{
		Budget: m.budget, PeakBytes: m.peakBytes.Load(), PeakRows: m.peakRows.Load(),
		SpilledRows: m.spilledRows.Load(), SpilledBytes: m.spilledBytes.Load(), SpillFiles: m.spillFiles.Load(),
		MergePasses: m.mergePasses.Load(),
	}
}

// sizer estimates the size of values of type E: a constant for types
// that hold no pointers (no strings, slices, maps, pointers or
// interfaces), else sizeOf, which walks the value.
type sizer[E any] struct{ flat int64 }

func newSizer[E any]() sizer[E] {
	if flat(reflect.TypeFor[E]()) {
		var zero E
		return sizer[E]{flat: max(int64(unsafe.Sizeof(zero)), 1)}
	}
	return sizer[E]{}
}

// of is the size of *e; e should point into a slice (a pointer to a
// local variable makes it escape to the heap).
func (z sizer[E]) of(e *E) int64 {
	if z.flat > 0 {
		return z.flat
	}
	return sizeOf(e)
}

// val is the size of e; it allocates only for types that are not flat.
func (z sizer[E]) val(e E) int64 {
	if z.flat > 0 {
		return z.flat
	}
	return sizeOfVal(e)
}

//go:noinline
func sizeOfVal[E any](e E) int64 { return sizeOf(&e) }

// flat says whether values of t hold nothing outside themselves.
func flat(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return flat(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !flat(t.Field(i).Type) {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// spillable says why rows of type t cannot be spilled faithfully with
// encoding/gob, or nil: gob drops unexported struct fields and fields of
// func or chan type without a word, so a row type with any would come
// back from a spill file changed. Types that encode themselves
// (gob.GobEncoder, encoding.BinaryMarshaler) are taken as they are.
func spillable(t reflect.Type) error {
	seen := map[reflect.Type]bool{}
	if t.Kind() == reflect.Struct && t.PkgPath() == reflect.TypeFor[config]().PkgPath() {
		// One of this package's wrappers (a row and its key): name the
		// user's types, not the wrapper.
		for i := range t.NumField() {
			f := t.Field(i).Type
			if err := spillableAt(f, typeName(f), seen); err != nil {
				return err
			}
		}
		return nil
	}
	return spillableAt(t, typeName(t), seen)
}

// typeName is t as Go code names it (without the ·N of function-local
// types).
func typeName(t reflect.Type) string { return localSuffix.ReplaceAllString(t.String(), "") }

var localSuffix = regexp.MustCompile(`·\d+`)

var (
	gobEncoderType = reflect.TypeFor[gob.GobEncoder]()
	binaryType     = reflect.TypeFor[encoding.BinaryMarshaler]()
)

func spillableAt(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(gobEncoderType) || t.Implements(binaryType) ||
		reflect.PointerTo(t).Implements(gobEncoderType) || reflect.PointerTo(t).Implements(binaryType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return fmt.Errorf("%s is a %v, which gob cannot encode", path, t.Kind())
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return spillableAt(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if err := spillableAt(t.Key(), path+" key", seen); err != nil {
			return err
		}
		return spillableAt(t.Elem(), path+" value", seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				return fmt.Errorf("field %s.%s is unexported, and gob would drop it", path, f.Name)
			}
			if err := spillableAt(f.Type, path+"."+f.Name, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// spillArea is where one operator of one run writes its spill files: a
// prefix in the bucket given by [SpillTo], or a temporary directory made
// on the first spill. Every file is deleted by the end of the run.
type spillArea struct {
	r      *run
	o      *opState
	bucket storage.Bucket // from SpillTo; nil until the first spill otherwise
	user   bool

	once    sync.Once
	initErr error
	dir     string // the temporary directory, when not user
	prefix  string
	next    atomic.Int64

	mu   sync.Mutex
	live map[string]bool // keys written and not yet deleted
}

func newSpillArea(r *run, o *opState, cfg *config) *spillArea {
	a := &spillArea{r: r, o: o, bucket: cfg.spill, user: cfg.spill != nil, live: map[string]bool{}}
	r.onEnd(a.close)
	return a
}

func (a *spillArea) init() error {
	a.once.Do(func() {
		suffix := strconv.FormatUint(rand.Uint64(), 36)
		if a.user {
			a.prefix = "goray-spill-" + suffix + "/"
			return
		}
		dir, err := os.MkdirTemp("", "goray-data-spill-*")
		if err != nil {
			a.initErr = fmt.Errorf("data: %s: spill directory: %w", a.o.name, err)
			return
		}
		b, err := storage.Dir(dir)
		if err != nil {
			os.RemoveAll(dir)
			a.initErr = fmt.Errorf("data: %s: spill directory: %w", a.o.name, err)
			return
		}
		a.mu.Lock()
		a.dir, a.bucket = dir, b
		a.mu.Unlock()
	})
	return a.initErr
}

// create names a new spill file, which is deleted by the run's end.
func (a *spillArea) create() (*spillFile, error) {
	if err := a.init(); err != nil {
		return nil, err
	}
	key := a.prefix + "run-" + strconv.FormatInt(a.next.Add(1), 10) + ".gob"
	a.mu.Lock()
	a.live[key] = true
	a.mu.Unlock()
	a.o.mem.spillFiles.Add(1)
	return &spillFile{a: a, key: key}, nil
}

// remove deletes a spill file that has been read.
func (a *spillArea) remove(ctx context.Context, key string) error {
	a.mu.Lock()
	live := a.live[key]
	delete(a.live, key)
	a.mu.Unlock()
	if !live {
		return nil
	}
	if err := a.bucket.Delete(ctx, key); err != nil && !errors.Is(err, storage.ErrNotExist) {
		return fmt.Errorf("data: %s: removing spill file: %w", a.o.name, err)
	}
	return nil
}

// close deletes what is left: every live key in a user's bucket, the
// whole directory otherwise. It runs when the run ends, after every
// goroutine of it.
func (a *spillArea) close(ctx context.Context) {
	a.mu.Lock()
	keys := make([]string, 0, len(a.live))
	for k := range a.live {
		keys = append(keys, k)
	}
	a.live = map[string]bool{}
	dir, b := a.dir, a.bucket
	a.mu.Unlock()
	if !a.user {
		if b != nil {
			b.Close()
		}
		if dir != "" {
			os.RemoveAll(dir)
		}
		return
	}
	for _, k := range keys {
		_ = b.Delete(ctx, k)
	}
}

// spillFile is one file of encoded chunks of rows. Each chunk is one gob
// value, a chunk[E]; a file holds one gob stream, so the row type is sent
// once per file.
type spillFile struct {
	a     *spillArea
	key   string
	rows  int64
	bytes int64
}

// chunk is what a spill file holds: rows and their estimated size in
// memory, so that a reader accounts for them without sizing them again.
type chunk[E any] struct {
	Bytes int64
	Rows  []E
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// runWriter writes chunks to a spill file: with gob, or, for rows of a
// flat type (no pointers, strings, slices, maps or interfaces), as their
// bytes in memory (the file is read back by the same process), which is
// several times faster.
type runWriter[E any] struct {
	f   *spillFile
	w   io.WriteCloser
	cw  *countingWriter
	bw  *bufio.Writer
	enc *gob.Encoder
	raw bool
}

// rawRows says whether rows of type E are spilled as their bytes.
func rawRows[E any]() bool { return flat(reflect.TypeFor[E]()) }

// rowBytes is the memory of rows, for rows of a flat type.
func rowBytes[E any](rows []E) []byte {
	if len(rows) == 0 || unsafe.Sizeof(rows[0]) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), len(rows)*int(unsafe.Sizeof(rows[0])))
}

func newRunWriter[E any](ctx context.Context, a *spillArea, bufSize int) (*runWriter[E], error) {
	f, err := a.create()
	if err != nil {
		return nil, err
	}
	w, err := a.bucket.NewWriter(ctx, f.key)
	if err != nil {
		return nil, fmt.Errorf("data: %s: spill: %w", a.o.name, err)
	}
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, bufSize)
	return &runWriter[E]{f: f, w: w, cw: cw, bw: bw, enc: gob.NewEncoder(bw), raw: rawRows[E]()}, nil
}

func (w *runWriter[E]) write(rows []E, bytes int64) error {
	if len(rows) == 0 {
		return nil
	}
	if w.raw {
		var h [16]byte
		binary.LittleEndian.PutUint64(h[:8], uint64(bytes))
		binary.LittleEndian.PutUint64(h[8:], uint64(len(rows)))
		if _, err := w.bw.Write(h[:]); err != nil {
			return fmt.Errorf("data: %s: spill: %w", w.f.a.o.name, err)
		}
		if _, err := w.bw.Write(rowBytes(rows)); err != nil {
			return fmt.Errorf("data: %s: spill: %w", w.f.a.o.name, err)
		}
	} else if err := w.enc.Encode(&chunk[E]{Bytes: bytes, Rows: rows}); err != nil {
		return fmt.Errorf("data: %s: spilling rows of %T: %w", w.f.a.o.name, rows[0], err)
	}
	w.f.rows += int64(len(rows))
	w.f.bytes += bytes
	return nil
}

// close finishes the file; abort discards it.
func (w *runWriter[E]) close() (*spillFile, error) {
	if err := w.bw.Flush(); err != nil {
		w.w.Close()
		return nil, fmt.Errorf("data: %s: spill: %w", w.f.a.o.name, err)
	}
	if err := w.w.Close(); err != nil {
		return nil, fmt.Errorf("data: %s: spill: %w", w.f.a.o.name, err)
	}
	m := w.f.a.o.mem
	m.spilledRows.Add(w.f.rows)
	m.spilledBytes.Add(w.cw.n)
	return w.f, nil
}

// runReader reads a spill file's chunks back, one at a time.
type runReader[E any] struct {
	f   *spillFile
	rc  io.ReadCloser
	br  *bufio.Reader
	dec *gob.Decoder
	raw bool
}

func openRun[E any](ctx context.Context, f *spillFile, bufSize int) (*runReader[E], error) {
	rc, err := f.a.bucket.NewRangeReader(ctx, f.key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("data: %s: reading spill file: %w", f.a.o.name, err)
	}
	br := bufio.NewReaderSize(rc, bufSize)
	return &runReader[E]{f: f, rc: rc, br: br, dec: gob.NewDecoder(br), raw: rawRows[E]()}, nil
}

// next reads the next chunk; io.EOF at the end.
func (r *runReader[E]) next() (chunk[E], error) {
	var c chunk[E] // gob merges into what is there: decode into a new value
	if r.raw {
		var h [16]byte
		if _, err := io.ReadFull(r.br, h[:]); err != nil {
			if err == io.EOF {
				return c, io.EOF
			}
			return c, fmt.Errorf("data: %s: reading spill file %s: %w", r.f.a.o.name, r.f.key, err)
		}
		c.Bytes = int64(binary.LittleEndian.Uint64(h[:8]))
		c.Rows = make([]E, binary.LittleEndian.Uint64(h[8:]))
		if _, err := io.ReadFull(r.br, rowBytes(c.Rows)); err != nil {
			return c, fmt.Errorf("data: %s: reading spill file %s: %w", r.f.a.o.name, r.f.key, err)
		}
		return c, nil
	}
	err := r.dec.Decode(&c)
	if err == io.EOF {
		return c, io.EOF
	}
	if err != nil {
		return c, fmt.Errorf("data: %s: reading spill file %s: %w", r.f.a.o.name, r.f.key, err)
	}
	return c, nil
}

// close closes the file and deletes it.
func (r *runReader[E]) close(ctx context.Context) error {
	r.rc.Close()
	return r.f.a.remove(context.WithoutCancel(ctx), r.f.key)
}
