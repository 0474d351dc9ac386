package data

import (
	"context"
	"io"
)

// This file holds the hooks for file formats beyond the built-in JSON Lines
// and CSV: github.com/goray-dev/goray/data/parquet adds Parquet with them,
// as a module of its own so that programs that do not read Parquet do not
// build parquet-go and its compression codecs.

// File is one file that a format's reader reads; see [ReadFiles].
type File struct{ f file }

// Name names the file in positions and errors.
func (f File) Name() string { return f.f.name }

// Open opens the file for sequential reading.
func (f File) Open(ctx context.Context) (io.ReadCloser, error) { return f.f.open(ctx) }

// ReaderAt opens the file for random access, for formats such as Parquet
// that read a footer first: range reads on a bucket, the whole stream in
// memory for [FromStream]. Call done when finished.
func (f File) ReaderAt(ctx context.Context) (r ReaderAtSize, done func() error, err error) {
	return f.f.readerAt(ctx)
}

// ReaderAtSize is random access to a file of known size.
type ReaderAtSize interface {
	io.ReaderAt
	Size() int64
}

// RowWriter receives the rows that a format's reader decodes from one file; see
// [ReadFiles].
type RowWriter[T any] struct{ w *blockWriter[T] }

// Put adds a row read at position p. A non-nil error means the run is
// over (it failed, was cancelled or has all the rows it wants): return it
// from the read function at once.
func (r RowWriter[T]) Put(row T, p Pos) error { return r.w.put(row, p) }

// Bad reports a row at p that does not decode: it fails the run with a
// [RowError], or is counted and skipped under [SkipBadRows] (then Bad
// returns nil and reading goes on).
func (r RowWriter[T]) Bad(p Pos, err error) error { return r.w.bad(p, err) }

// Failed turns an error reading the file at p into the run's
// [SourceError] (context errors pass through as they are); return it.
func (r RowWriter[T]) Failed(ctx context.Context, p Pos, err error) error {
	return sourceFailed(ctx, p, err)
}

// ReadFiles makes a dataset of the rows that read decodes from each of
// files: the hook for file formats beyond [ReadJSONL] and [ReadCSV]. Files
// are read one after another in key order, or up to 4 at once in an
// unordered run; name names the source in stats and errors
// ("read_parquet").
func ReadFiles[T any](name string, files Files, read func(ctx context.Context, f File, rows RowWriter[T]) error, opts ...Option) *Dataset[T] {
	return fileSource(name, files, opts, func(ctx context.Context, f file, w *blockWriter[T]) error {
		return read(ctx, File{f}, RowWriter[T]{w})
	})
}

// Encoder writes rows in one file format; see [WriteFile].
type Encoder[T any] interface {
	// Write encodes rows, in order.
	Write(rows []T) error
	// Close finishes the file (buffers, footers). It does not close the
	// writer the encoder was made with.
	Close() error
}

// WriteFile runs d and writes its rows, encoded by the [Encoder] that
// newEncoder makes on the file, to the one file that to names,
// atomically: the file appears, complete, only when the run succeeds. It
// is the hook for file formats beyond [WriteJSONL] and [WriteCSV].
func WriteFile[T any](ctx context.Context, d *Dataset[T], to Files, newEncoder func(w io.Writer) (Encoder[T], error), opts ...Option) error {
	return writeFile(ctx, d, to, opts, newEncoder)
}
