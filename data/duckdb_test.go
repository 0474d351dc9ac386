package data_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// The files under testdata/duckdb were written by DuckDB (an independent
// CSV and JSON implementation; version and how in testdata/duckdb/README.md)
// from the SQL in scripts/duckdb-testdata.mjs. The expectations below are
// that SQL's literals.

type duckText struct {
	ID    int     `csv:"id" json:"id"`
	Name  string  `csv:"name" json:"name"`
	Note  *string `csv:"note" json:"note"`
	Maybe *int    `csv:"maybe" json:"maybe"`
	OK    bool    `csv:"ok" json:"ok"`
	F     float64 `csv:"f" json:"f"`
}

func ptr[T any](v T) *T { return &v }

var duckWant = []duckText{
	{ID: 1, Name: "plain", Note: ptr("x"), Maybe: ptr(42), OK: true, F: 0.5},
	{ID: 2, Name: "line\r\nbreak, \"quoted\" ünïcode", F: -2.25}, // NULL note and maybe
	{ID: 3, Name: "", Note: ptr(""), Maybe: ptr(7)},
}

// DuckDB writes NULL as an empty field and the empty string as "", and
// keeps a quoted field's CRLF: both read back as they were written.
func TestReadsDuckDBCSV(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	got, err := data.Take(ctx, data.ReadCSV[duckText](data.LocalFiles("testdata/duckdb/text.csv")), 10)
	is.NoErr(err)
	is.Equal(got, duckWant)

	// Without pointers: an empty string field still reads NULL as "", a
	// number field cannot hold it and says so.
	type plain struct {
		Note  string `csv:"note"`
		Maybe int    `csv:"maybe"`
	}
	_, err = data.Take(ctx, data.ReadCSV[plain](data.LocalFiles("testdata/duckdb/text.csv")), 10)
	is.True(err != nil)
	t.Log(err)
	is.True(strings.Contains(err.Error(), `text.csv:3 (row 1): column "maybe": NULL (an empty field) does not fit int; make the field a pointer (*int)`)) // the record of id 2 starts on line 3
}

func TestReadsDuckDBJSONL(t *testing.T) {
	is := is.New(t)
	got, err := data.Take(context.Background(), data.ReadJSONL[duckText](data.LocalFiles("testdata/duckdb/text.jsonl")), 10)
	is.NoErr(err)
	is.Equal(got, duckWant)
}

// The rows of DuckDB's CSV file, written by goray, are the same bytes:
// NULL empty, "" quoted, quotes doubled, the CRLF inside a field kept.
func TestWritesCSVAsDuckDB(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	type row struct {
		ID    int     `csv:"id"`
		Name  string  `csv:"name"`
		Note  *string `csv:"note"`
		Maybe *int    `csv:"maybe"`
	}
	in := data.ReadCSV[row](data.LocalFiles("testdata/duckdb/strings.csv"))
	out := filepath.Join(t.TempDir(), "out.csv")
	is.NoErr(data.WriteCSV(ctx, in, data.LocalFiles(out)))
	want, err := os.ReadFile("testdata/duckdb/strings.csv")
	is.NoErr(err)
	got, err := os.ReadFile(out)
	is.NoErr(err)
	is.Equal(string(got), string(want))
}
