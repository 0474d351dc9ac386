package data

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// readParallel is how many files an unordered run reads at once.
const readParallel = 4

// fileSource makes a dataset that reads each of files with read, one file
// after the other, or up to readParallel at once in an unordered run.
func fileSource[T any](name string, files Files, opts []Option, read func(ctx context.Context, f file, w *blockWriter[T]) error) *Dataset[T] {
	return sourceOf(name, opts, readParallel, func(ctx context.Context, r *run) ([]partition[T], error) {
		fs, closeFiles, err := files.list(ctx)
		if err != nil {
			return nil, err
		}
		r.onEnd(func(context.Context) { closeFiles() })
		parts := make([]partition[T], len(fs))
		for i, f := range fs {
			parts[i] = partition[T]{name: f.name, read: func(ctx context.Context, w *blockWriter[T]) error { return read(ctx, f, w) }}
		}
		return parts, nil
	})
}

// sourceFailed wraps a read error, leaving context errors as they are.
func sourceFailed(ctx context.Context, p Pos, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &SourceError{Pos: p, Err: err}
}

// ReadJSONL reads JSON Lines files: each non-blank line is one JSON value
// decoded into a T with encoding/json. A line that does not decode is a bad
// row (see [SkipBadRows]); a file that cannot be read fails the run with a
// [SourceError].
func ReadJSONL[T any](files Files, opts ...Option) *Dataset[T] {
	return fileSource("read_jsonl", files, opts, func(ctx context.Context, f file, w *blockWriter[T]) error {
		rc, err := f.open(ctx)
		if err != nil {
			return sourceFailed(ctx, Pos{Source: f.name}, err)
		}
		defer rc.Close()
		br := bufio.NewReaderSize(rc, 64<<10)
		var row, line int64
		var buf []byte
		for {
			b, long, err := readLine(br, buf[:0], w.maxLine)
			buf = b
			if long {
				line++
				p := Pos{Source: f.name, Row: row, Line: line}
				row++
				if err := w.bad(p, fmt.Errorf("line %w (%d bytes)", errTooLong, w.maxLine)); err != nil {
					return err
				}
			} else if len(b) > 0 {
				line++
				if b = bytes.TrimSpace(b); len(b) > 0 {
					p := Pos{Source: f.name, Row: row, Line: line}
					row++
					var v T
					if uerr := json.Unmarshal(b, &v); uerr != nil {
						if err := w.bad(p, uerr); err != nil {
							return err
						}
					} else if err := w.put(v, p); err != nil {
						return err
					}
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return sourceFailed(ctx, Pos{Source: f.name, Row: row, Line: line + 1}, err)
			}
		}
	})
}

// readLine reads one line, through its '\n', into buf; a line longer
// than max is read to its end without being kept, and reported as long.
func readLine(br *bufio.Reader, buf []byte, max int) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(buf)+len(frag) > max {
				long, buf = true, buf[:0]
			} else {
				buf = append(buf, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return buf, long, err
		}
	}
}

// ReadCSV reads CSV files (RFC 4180: comma-separated, fields optionally
// quoted, records ended by LF or CRLF, empty lines skipped) into rows of
// type T: []string (every record, no header), map[string]string (header →
// value), or a struct whose fields (string, bool, ints, uints, floats, or
// pointers to them) match columns by `csv:"name"` tag or field name. A
// quoted field is read byte for byte: a line break inside quotes stays
// CRLF where the file has CRLF (encoding/csv would turn it into LF).
//
// NULL is an empty field without quotes, and the empty string a quoted
// empty field (""), as PostgreSQL's COPY and DuckDB write them: a pointer
// field reads NULL as nil, a string field as "", and a bool or number
// field refuses it (a bad row naming the column). []string and map rows
// read both as "". A record that does not parse or convert is a bad row.
func ReadCSV[T any](files Files, opts ...Option) *Dataset[T] {
	codec, cerr := newCSVCodec[T]()
	return fileSource("read_csv", files, opts, func(ctx context.Context, f file, w *blockWriter[T]) error {
		if cerr != nil {
			return cerr
		}
		rc, err := f.open(ctx)
		if err != nil {
			return sourceFailed(ctx, Pos{Source: f.name}, err)
		}
		defer rc.Close()
		cr := newCSVReader(rc, w.maxLine)
		var header []string
		if codec.hasHeader() {
			header, _, err = cr.Read()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return sourceFailed(ctx, Pos{Source: f.name, Line: 1}, err)
			}
		}
		decode := codec.decoder(header)
		var row int64
		for {
			lastLine := int64(cr.line) // the line the previous record ended on
			rec, line, err := cr.Read()
			if err == io.EOF {
				return nil
			}
			if errors.Is(err, errRecordTooLong) {
				return sourceFailed(ctx, Pos{Source: f.name, Row: row, Line: lastLine + 1},
					fmt.Errorf("the record from line %d on is %w (%d bytes)", lastLine+1, errTooLong, w.maxLine))
			}
			var se *csvSyntaxError
			switch {
			case errors.As(err, &se):
				p := Pos{Source: f.name, Row: row, Line: int64(line)}
				row++
				if err := w.bad(p, err); err != nil {
					return err
				}
				continue
			case err != nil:
				return sourceFailed(ctx, Pos{Source: f.name, Row: row}, err)
			}
			p := Pos{Source: f.name, Row: row, Line: int64(line)}
			row++
			v, derr := decode(rec, cr.null)
			if derr != nil {
				if err := w.bad(p, derr); err != nil {
					return err
				}
				continue
			}
			if err := w.put(v, p); err != nil {
				return err
			}
		}
	})
}
