package data_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/storage"
)

// A JSON line or CSV record longer than MaxLineBytes is an error naming the
// file and the line, not a line held whole in memory: a bad row for JSON
// Lines (skippable), a SourceError for CSV.
func TestMaxLineBytes(t *testing.T) {
	ctx := context.Background()
	b := storage.NewMem()
	defer b.Close()
	long := strings.Repeat("x", 3<<20)
	is := is.New(t)
	is.NoErr(storage.WriteAll(ctx, b, "a.jsonl", []byte(`{"n":1}`+"\n"+`{"n":"`+long+`"}`+"\n"+`{"n":3}`+"\n")))
	is.NoErr(storage.WriteAll(ctx, b, "a.csv", []byte("n\n1\n\""+long+"\"\n3\n")))
	type row struct{ N int }

	t.Run("jsonl", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Take(ctx, data.ReadJSONL[row](data.InBucket(b, "a.jsonl"), data.MaxLineBytes(1<<20)), 10)
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos.Source, "a.jsonl")
		is.Equal(re.Pos.Line, int64(2))
		is.True(strings.Contains(err.Error(), "longer than MaxLineBytes (1048576 bytes)"))
		got, err := data.Take(ctx, data.ReadJSONL[row](data.InBucket(b, "a.jsonl"), data.MaxLineBytes(1<<20)), 10, data.SkipBadRows(1))
		is.NoErr(err)
		is.Equal(got, []row{{1}, {3}}) // the rows around it are read
		all, err := data.Take(ctx, data.ReadJSONL[map[string]any](data.InBucket(b, "a.jsonl")), 10)
		is.NoErr(err) // under the default of 16 MiB
		is.Equal(len(all), 3)
	})
	t.Run("csv", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Take(ctx, data.ReadCSV[map[string]string](data.InBucket(b, "a.csv"), data.MaxLineBytes(1<<20)), 10)
		var se *data.SourceError
		is.True(errors.As(err, &se))
		t.Log(err)
		is.Equal(se.Pos.Source, "a.csv")
		is.Equal(se.Pos.Line, int64(3))
		is.True(strings.Contains(err.Error(), "longer than MaxLineBytes"))
		got, err := data.Take(ctx, data.ReadCSV[map[string]string](data.InBucket(b, "a.csv")), 10)
		is.NoErr(err)
		is.Equal(len(got), 3)
	})
	t.Run("invalid", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Take(ctx, data.ReadCSV[map[string]string](data.InBucket(b, "a.csv"), data.MaxLineBytes(0)), 10)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), "MaxLineBytes(0): must be at least 1"))
	})
}
