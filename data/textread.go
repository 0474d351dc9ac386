package data

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
)

// ReadText reads text files line by line, like Ray Data's read_text: each
// line is a row, without its line break ("\n" or "\r\n"); empty lines are
// skipped (their line numbers still count). Rows are positioned by file,
// row and line. A line longer than [MaxLineBytes] is a bad row naming the
// file and line (see [SkipBadRows]), skipped without being held, so a file
// without line breaks cannot make the source hold it whole; a file that
// cannot be read fails the run with a [SourceError]. Files are named as
// for every source ([Files]: a file, a folder or a glob, local or in a
// bucket), and read in key order.
func ReadText(files Files, opts ...Option) *Dataset[string] {
	return fileSource("read_text", files, opts, func(ctx context.Context, f file, w *blockWriter[string]) error {
		rc, err := f.open(ctx)
		if err != nil {
			return sourceFailed(ctx, Pos{Source: f.name}, err)
		}
		defer rc.Close()
		br := bufio.NewReaderSize(rc, 64<<10)
		var row, line int64
		var buf []byte
		for {
			b, long, err := readLine(br, buf[:0], w.maxLine+2) // the limit is on the line, not its break
			buf = b
			if long || len(b) > 0 {
				line++
				b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
				switch {
				case long || len(b) > w.maxLine:
					p := Pos{Source: f.name, Row: row, Line: line}
					row++
					if err := w.bad(p, fmt.Errorf("line %w (%d bytes)", errTooLong, w.maxLine)); err != nil {
						return err
					}
				case len(b) > 0:
					p := Pos{Source: f.name, Row: row, Line: line}
					row++
					if err := w.put(string(b), p); err != nil {
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

// BinaryFile is a row of [ReadBinaryFiles]: one whole file.
type BinaryFile struct {
	// Path is the file's name as [Files] lists it: the local path, or the
	// key in the bucket.
	Path string
	// Bytes is the file's content.
	Bytes []byte
}

// DefaultMaxFileBytes is the largest file [ReadBinaryFiles] reads unless
// [MaxFileBytes] says otherwise.
const DefaultMaxFileBytes = 256 << 20

// MaxFileBytes caps the bytes of one file that [ReadBinaryFiles] reads
// (default [DefaultMaxFileBytes], 256 MiB). A larger file is a bad row
// naming the file (see [SkipBadRows]); at most n+1 of its bytes are read.
// n must be at least 1.
func MaxFileBytes(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "MaxFileBytes(%d): must be at least 1", n)
			return
		}
		c.maxFile = n
	})
}

// ReadBinaryFiles reads whole files, one row each, like Ray Data's
// read_binary_files with include_paths: the file's name and its bytes.
// Files are named as for every source ([Files]: a file, a folder or a
// glob, local or in a bucket) and read in key order (up to 4 at once in
// an [Unordered] run).
//
// Memory: a file is read whole into its row, so each source block holds
// one file (unless [BlockRows] is given to ReadBinaryFiles), a file over
// [MaxFileBytes] is a bad row naming it (skippable with [SkipBadRows])
// read no further than the limit, and [MaxBytesInFlight] (given to the
// sink, it applies to every operator) bounds the bytes of the rows held
// at once; [MaxRowsInFlight] alone bounds only their number. A file that
// cannot be read fails the run with a [SourceError] naming it.
func ReadBinaryFiles(files Files, opts ...Option) *Dataset[BinaryFile] {
	opts = append([]Option{BlockRows(1)}, opts...)
	return fileSource("read_binary_files", files, opts, func(ctx context.Context, f file, w *blockWriter[BinaryFile]) error {
		rc, err := f.open(ctx)
		if err != nil {
			return sourceFailed(ctx, Pos{Source: f.name}, err)
		}
		defer rc.Close()
		p := Pos{Source: f.name}
		b, err := io.ReadAll(io.LimitReader(rc, w.maxFile+1))
		if err != nil {
			return sourceFailed(ctx, p, err)
		}
		if int64(len(b)) > w.maxFile {
			return w.bad(p, fmt.Errorf("%w (%d bytes)", errFileTooLarge, w.maxFile))
		}
		return w.put(BinaryFile{Path: f.name, Bytes: b}, p)
	})
}
