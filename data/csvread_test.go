package data

import (
	"encoding/csv"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// csvRecords reads every record of s with csvReader: records, the line
// each starts on, and for a syntax error the record's index.
func csvRecords(s string, max int) (recs [][]string, lines []int, bad []int, err error) {
	r := newCSVReader(strings.NewReader(s), max)
	for {
		rec, line, err := r.Read()
		var se *csvSyntaxError
		switch {
		case err == io.EOF:
			return recs, lines, bad, nil
		case errors.As(err, &se):
			bad = append(bad, len(recs))
			lines = append(lines, line)
			recs = append(recs, nil)
			continue
		case err != nil:
			return recs, lines, bad, err
		}
		recs = append(recs, rec)
		lines = append(lines, line)
	}
}

// stdRecords is the same with encoding/csv, as ReadCSV used it before.
func stdRecords(s string) (recs [][]string, lines []int, bad []int) {
	r := csv.NewReader(strings.NewReader(s))
	r.FieldsPerRecord = -1
	for {
		rec, err := r.Read()
		var pe *csv.ParseError
		switch {
		case err == io.EOF:
			return recs, lines, bad
		case errors.As(err, &pe):
			bad = append(bad, len(recs))
			lines = append(lines, pe.StartLine)
			recs = append(recs, nil)
			continue
		case err != nil:
			panic(err)
		}
		line, _ := r.FieldPos(0)
		recs = append(recs, rec)
		lines = append(lines, line)
	}
}

// Where a file has no carriage return, csvReader reads what encoding/csv
// reads: the same records, starting on the same lines, and syntax errors
// on the same records.
func FuzzCSVReaderMatchesEncodingCSV(f *testing.F) {
	for _, s := range []string{
		"", "a", "a,b\nc,d\n", "a,b\n\n\nc\n", `"a ""q"" b",c` + "\n",
		"\"multi\nline\",x\ny\n", `a"b,c`, `"a"b`, `"unterminated`, "\"a\",\n,\n", ",,\n",
		"x\n\"\"\n\"\",\"\"\n", "a,\"b\nc\"d\ne\n", "  a , b \n", "é,ü\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ReplaceAll(s, "\r", "")
		recs, lines, bad, err := csvRecords(s, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		wantRecs, wantLines, wantBad := stdRecords(s)
		is := is.New(t)
		is.Equal(bad, wantBad)
		is.Equal(lines, wantLines)
		is.Equal(recs, wantRecs)
	})
}

func TestCSVReaderKeepsWhatIsQuoted(t *testing.T) {
	cases := []struct {
		in   string
		want [][]string
		null [][]bool
	}{
		{"a,\"b\r\nc\"\r\nd,e\r\n", [][]string{{"a", "b\r\nc"}, {"d", "e"}}, [][]bool{{false, false}, {false, false}}},
		{"\"\r\n\",\"\n\"\n", [][]string{{"\r\n", "\n"}}, nil},
		{"a\rb,c\r\n", [][]string{{"a\rb", "c"}}, nil}, // a lone CR is data
		{",\"\",x\n", [][]string{{"", "", "x"}}, [][]bool{{true, false, false}}},
		{"\r\n\r\nx\r\n", [][]string{{"x"}}, nil}, // empty lines skipped
		{"last", [][]string{{"last"}}, nil},       // no final line break
		{"\"last\"", [][]string{{"last"}}, nil},
	}
	for _, tt := range cases {
		is := is.New(t)
		r := newCSVReader(strings.NewReader(tt.in), 1<<20)
		for i, want := range tt.want {
			rec, _, err := r.Read()
			is.NoErr(err)
			is.Equal(rec, want)
			if tt.null != nil {
				for j, n := range tt.null[i] {
					is.Equal(r.null(j), n) // NULL: empty and not quoted
				}
			}
		}
		_, _, err := r.Read()
		is.Equal(err, io.EOF)
	}
}

func TestCSVReaderErrors(t *testing.T) {
	is := is.New(t)
	_, _, err := newCSVReader(strings.NewReader("a,b\nc,d\"e\n"), 100).Read()
	is.NoErr(err)
	r := newCSVReader(strings.NewReader("a,b\nc,d\"e\nf\n"), 100)
	_, _, _ = r.Read()
	_, line, err := r.Read()
	is.Equal(line, 2)
	is.Equal(err.Error(), `CSV syntax error on line 2, column 4: bare " in a field that does not start with a quote (double it inside a quoted field)`)
	rec, _, err := r.Read() // goes on at the next line
	is.NoErr(err)
	is.Equal(rec, []string{"f"})

	_, _, err = newCSVReader(strings.NewReader("\"abc\"d\n"), 100).Read()
	is.Equal(err.Error(), `CSV syntax error on line 1, column 5: extraneous or missing " in quoted field`)

	long := "\"" + strings.Repeat("x\r\n", 100) + "\"\n"
	_, _, err = newCSVReader(strings.NewReader(long), 200).Read()
	is.Equal(err, errRecordTooLong) // counted across the lines of one record
	rec, _, err = newCSVReader(strings.NewReader(long), 400).Read()
	is.NoErr(err)
	is.Equal(rec[0], strings.Repeat("x\r\n", 100))
}

func TestCSVWriterQuotes(t *testing.T) {
	is := is.New(t)
	var b strings.Builder
	w := newCSVWriter(&b)
	is.NoErr(w.Write([]string{"plain", "", "", "a,b", `say "hi"`, "x\r\ny", " lead", `\.`}, []bool{false, true}))
	is.NoErr(w.Flush())
	is.Equal(b.String(), `plain,,"","a,b","say ""hi""","x`+"\r\n"+`y"," lead","\."`+"\n")
	// encoding/csv reads it back the same, except the CRLF inside quotes.
	rec, err := csv.NewReader(strings.NewReader(b.String())).Read()
	is.NoErr(err)
	is.Equal(rec, []string{"plain", "", "", "a,b", `say "hi"`, "x\ny", " lead", `\.`})
}

// BenchmarkCSVRead reads the same 10,000 records with csvReader and with
// encoding/csv (the baseline, in the same run).
func BenchmarkCSVRead(b *testing.B) {
	var sb strings.Builder
	for i := range 10000 {
		sb.WriteString(`12345,"a quoted, field",plain text here,3.25,`)
		if i%10 == 0 {
			sb.WriteString("\"two\r\nlines\"")
		}
		sb.WriteString("\r\n")
	}
	in := sb.String()
	b.Run("goray", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			r := newCSVReader(strings.NewReader(in), 1<<20)
			for {
				if _, _, err := r.Read(); err != nil {
					break
				}
			}
		}
	})
	b.Run("encoding-csv", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			r := csv.NewReader(strings.NewReader(in))
			r.FieldsPerRecord = -1
			for {
				if _, err := r.Read(); err != nil {
					break
				}
			}
		}
	})
}
