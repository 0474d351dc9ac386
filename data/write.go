package data

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/goray-dev/goray/backend"
)

// writeFile runs d and writes its rows to the one file that to names,
// atomically: the file appears, complete, only when the run succeeds; on
// failure or cancellation nothing is left under its name.
func writeFile[T any](ctx context.Context, d *Dataset[T], to Files, opts []Option, newEnc func(w io.Writer) (Encoder[T], error)) (err error) {
	if err := checkRun(ctx, d, "write to "+to.String()); err != nil {
		return err
	}
	defer func() { err = coded(err) }()
	w, commit, abort, err := to.create(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			abort()
		}
	}()
	// The encoder is a format's code: a panic in it (parquet-go panics on
	// a struct tag it cannot use) fails the write like any error.
	op := "write " + to.String()
	var enc Encoder[T]
	if err := recovered(op, func() (err error) { enc, err = newEnc(w); return err }); err != nil {
		return encodeFailed(err)
	}
	if err := drain(ctx, d, opts, func(rows []T) error {
		if err := recovered(op, func() error { return enc.Write(rows) }); err != nil {
			return encodeFailed(fmt.Errorf("data: write %s: %w", to, err))
		}
		return nil
	}); err != nil {
		return err
	}
	if err := recovered(op, enc.Close); err != nil {
		return encodeFailed(fmt.Errorf("data: write %s: %w", to, err))
	}
	return commit()
}

// WriteJSONL runs d and writes its rows to one JSON Lines file, one
// encoding/json value per line, atomically (see [Files]).
func WriteJSONL[T any](ctx context.Context, d *Dataset[T], to Files, opts ...Option) error {
	return writeFile(ctx, d, to, opts, func(w io.Writer) (Encoder[T], error) {
		bw := bufio.NewWriterSize(w, 64<<10)
		return &jsonlEncoder[T]{bw: bw, enc: json.NewEncoder(bw)}, nil
	})
}

type jsonlEncoder[T any] struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

func (e *jsonlEncoder[T]) Write(rows []T) error {
	for i := range rows {
		if err := e.enc.Encode(&rows[i]); err != nil {
			return err
		}
	}
	return nil
}

func (e *jsonlEncoder[T]) Close() error { return e.bw.Flush() }

// WriteCSV runs d and writes its rows to one CSV file, atomically. Rows
// are []string (written as they are), map[string]string (a header of the
// first row's sorted keys) or a struct (a header of its column names, as
// for [ReadCSV]). A field is quoted where encoding/csv would quote it, and
// when it is the empty string; a nil pointer field (or a key a map row
// lacks) is NULL, an empty field without quotes, as PostgreSQL and DuckDB
// write NULL. Line breaks inside fields are written as they are.
func WriteCSV[T any](ctx context.Context, d *Dataset[T], to Files, opts ...Option) error {
	return writeFile(ctx, d, to, opts, func(w io.Writer) (Encoder[T], error) {
		codec, err := newCSVCodec[T]()
		if err != nil {
			return nil, err
		}
		return &csvEncoder[T]{codec: codec, cw: newCSVWriter(w)}, nil
	})
}

type csvEncoder[T any] struct {
	codec   *csvCodec[T]
	cw      *csvWriter
	header  []string
	null    []bool
	started bool
}

func (e *csvEncoder[T]) Write(rows []T) error {
	for _, row := range rows {
		if !e.started {
			e.started = true
			if e.header = e.codec.header(row); e.header != nil {
				if err := e.cw.Write(e.header, nil); err != nil {
					return err
				}
			}
		}
		if n := max(len(e.header), len(e.codec.fields)); len(e.null) < n {
			e.null = make([]bool, n)
		}
		clear(e.null)
		rec := e.codec.encode(e.header, row, e.null)
		if err := e.cw.Write(rec, e.null); err != nil {
			return err
		}
	}
	return nil
}

func (e *csvEncoder[T]) Close() error {
	if !e.started && e.codec.kind == csvStruct {
		if err := e.cw.Write(e.codec.header(*new(T)), nil); err != nil {
			return err
		}
	}
	return e.cw.Flush()
}

// encodeFailed codes an encoder's error: an I/O error (Unavailable), or
// else rows or a row type the format cannot encode (InvalidArgument),
// unless it has a code (a panic is TaskFailed).
func encodeFailed(err error) error {
	if err == nil || backend.CodeOf(err) != backend.Unknown {
		return err
	}
	switch c := codeFor(err); c {
	case backend.Internal:
		return &backend.Error{Code: backend.InvalidArgument, Err: err}
	default:
		return &backend.Error{Code: c, Err: err}
	}
}
