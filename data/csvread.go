package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// csvReader reads the records of RFC 4180 CSV (comma-separated, fields
// optionally in double quotes, a quote inside quotes doubled, records ended
// by LF or CRLF, empty lines skipped), like encoding/csv with its default
// settings, with two differences:
//
//   - the bytes of a quoted field are kept as they are: a line break
//     inside quotes stays CRLF where the file has CRLF (encoding/csv
//     turns it into LF, by design: golang/go#22746), so text read from a
//     file and written back is unchanged;
//   - a record longer than max bytes fails with errRecordTooLong as soon
//     as it is, instead of being held whole.
//
// Syntax errors are *csvSyntaxError; the reader then goes on at the next
// line, so a caller may skip the bad record.
type csvReader struct {
	br   *bufio.Reader
	max  int
	line int    // lines read so far
	n    int    // bytes of the current record read so far
	buf  []byte // the current record's fields, back to back
	ends []int  // where each field ends in buf
	nul  []bool // whether each field is NULL: empty and not quoted
	long []byte // a line longer than the bufio buffer, assembled
}

func newCSVReader(r io.Reader, max int) *csvReader {
	return &csvReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// errRecordTooLong is csvReader's error for a record over its max.
var errRecordTooLong = errors.New("data: CSV record longer than MaxLineBytes")

// csvSyntaxError is a record that is not CSV.
type csvSyntaxError struct {
	Line, Column int // 1-based; Column counts bytes
	Msg          string
}

func (e *csvSyntaxError) Error() string {
	return fmt.Sprintf("CSV syntax error on line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

const (
	errBareQuote = `bare " in a field that does not start with a quote (double it inside a quoted field)`
	errQuote     = `extraneous or missing " in quoted field`
)

// readLine returns the next line with its line break, or io.EOF. The slice
// is valid until the next call.
func (r *csvReader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if r.n+len(r.long) > r.max {
				return nil, errRecordTooLong
			}
			line, err = r.br.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if len(line) > 0 && err == io.EOF {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	r.n += len(line)
	if r.n > r.max {
		return nil, errRecordTooLong
	}
	r.line++
	return line, nil
}

// lineEnd is the length of line's line break: 2 for CRLF, 1 for LF, 0 at
// the end of the input.
func lineEnd(line []byte) int {
	switch n := len(line); {
	case n >= 2 && line[n-2] == '\r' && line[n-1] == '\n':
		return 2
	case n >= 1 && line[n-1] == '\n':
		return 1
	}
	return 0
}

// Read returns the next record and the line it starts on, or io.EOF. The
// strings do not alias the reader's buffers.
func (r *csvReader) Read() (rec []string, startLine int, err error) {
	r.n = 0
	var line []byte
	for {
		if line, err = r.readLine(); err != nil {
			return nil, 0, err
		}
		if lineEnd(line) != len(line) {
			break
		}
		r.n = 0 // an empty line is skipped
	}
	startLine = r.line
	r.buf, r.ends, r.nul = r.buf[:0], r.ends[:0], r.nul[:0]
	pos := 0
	for {
		if pos < len(line) && line[pos] == '"' {
			pos++
		quoted:
			for {
				i := bytes.IndexByte(line[pos:], '"')
				if i < 0 {
					// The field goes on past this line, line break included.
					r.buf = append(r.buf, line[pos:]...)
					if line, err = r.readLine(); err != nil {
						if err == io.EOF {
							return nil, startLine, &csvSyntaxError{Line: r.line, Column: len(line) + 1, Msg: errQuote}
						}
						return nil, startLine, err
					}
					pos = 0
					continue
				}
				r.buf = append(r.buf, line[pos:pos+i]...)
				pos += i + 1
				switch rest := line[pos:]; {
				case len(rest) > 0 && rest[0] == '"':
					r.buf = append(r.buf, '"')
					pos++
				case len(rest) > 0 && rest[0] == ',':
					pos++
					r.ends, r.nul = append(r.ends, len(r.buf)), append(r.nul, false)
					break quoted
				case lineEnd(rest) == len(rest):
					r.ends, r.nul = append(r.ends, len(r.buf)), append(r.nul, false)
					return r.record(), startLine, nil
				default:
					return nil, startLine, &csvSyntaxError{Line: r.line, Column: pos, Msg: errQuote}
				}
			}
			continue
		}
		rest := line[pos:]
		field, last := rest, true
		if i := bytes.IndexByte(rest, ','); i >= 0 {
			field, last = rest[:i], false
		} else {
			field = rest[:len(rest)-lineEnd(rest)]
		}
		if i := bytes.IndexByte(field, '"'); i >= 0 {
			return nil, startLine, &csvSyntaxError{Line: r.line, Column: pos + i + 1, Msg: errBareQuote}
		}
		r.buf = append(r.buf, field...)
		r.ends, r.nul = append(r.ends, len(r.buf)), append(r.nul, len(field) == 0)
		if last {
			return r.record(), startLine, nil
		}
		pos += len(field) + 1
	}
}

// null says whether field i of the last record read is NULL: empty and
// not in quotes (as PostgreSQL's COPY and DuckDB write NULL).
func (r *csvReader) null(i int) bool { return i < len(r.nul) && r.nul[i] }

// record splits buf into fields, as one string so that a record costs one
// allocation for its text.
func (r *csvReader) record() []string {
	s := string(r.buf)
	rec := make([]string, len(r.ends))
	start := 0
	for i, end := range r.ends {
		rec[i] = s[start:end]
		start = end
	}
	return rec
}

// csvWriter writes records that csvReader (and encoding/csv, PostgreSQL
// and DuckDB) read back as they were: a field is quoted when it holds a
// comma, a quote, a line break or a leading space (as encoding/csv's
// Writer does) or is the empty string; a NULL field is written empty,
// without quotes. Records end with LF; a line break inside a field is
// written as it is.
type csvWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newCSVWriter(w io.Writer) *csvWriter { return &csvWriter{w: bufio.NewWriter(w)} }

func (w *csvWriter) Write(rec []string, null []bool) error {
	b := w.buf[:0]
	for i, f := range rec {
		if i > 0 {
			b = append(b, ',')
		}
		if i < len(null) && null[i] {
			continue
		}
		if !csvNeedsQuotes(f) {
			b = append(b, f...)
			continue
		}
		b = append(b, '"')
		for {
			j := strings.IndexByte(f, '"')
			if j < 0 {
				break
			}
			b = append(b, f[:j+1]...)
			b = append(b, '"')
			f = f[j+1:]
		}
		b = append(b, f...)
		b = append(b, '"')
	}
	b = append(b, '\n')
	w.buf = b
	_, err := w.w.Write(b)
	return err
}

func (w *csvWriter) Flush() error { return w.w.Flush() }

// csvNeedsQuotes is encoding/csv's fieldNeedsQuotes, with the empty string
// quoted too, so that it is not read as NULL.
func csvNeedsQuotes(f string) bool {
	if f == "" || f == `\.` {
		return true
	}
	if strings.ContainsAny(f, ",\"\r\n") {
		return true
	}
	r, _ := utf8.DecodeRuneInString(f)
	return unicode.IsSpace(r)
}
