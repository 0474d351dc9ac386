package parquet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	pq "github.com/parquet-go/parquet-go"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/data/parquet"
	"github.com/goray-dev/goray/storage"
)

type record struct {
	ID    int     `parquet:"id"`
	Name  string  `parquet:"name"`
	Score float64 `parquet:"score"`
}

func records(n int) []record {
	out := make([]record, n)
	for i := range out {
		out[i] = record{ID: i, Name: fmt.Sprintf("r%d", i), Score: float64(i) / 4}
	}
	return out
}

// TestRoundTrip writes Parquet to a bucket and reads it back, on mem://,
// file:// and the local disk, from a file, a folder and a glob.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	fileBucket, err := storage.Dir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fileBucket.Close()
	memBucket := storage.NewMem()
	defer memBucket.Close()
	localDir := t.TempDir()
	stores := []struct {
		name string
		at   func(pattern string) data.Files
	}{
		{"mem", func(p string) data.Files { return data.InBucket(memBucket, p) }},
		{"file", func(p string) data.Files { return data.InBucket(fileBucket, p) }},
		{"local", func(p string) data.Files { return data.LocalFiles(filepath.Join(localDir, p)) }},
	}
	rows := records(1000)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			is := is.New(t)
			is.NoErr(parquet.Write(ctx, data.FromItems(rows[:600]), st.at("out/a.parquet")))
			is.NoErr(parquet.Write(ctx, data.FromItems(rows[600:]), st.at("out/b.parquet")))
			for _, pattern := range []string{"out", "out/*.parquet"} {
				got, err := data.Take(ctx, parquet.Read[record](st.at(pattern), data.BlockRows(64)), 2000)
				is.NoErr(err)
				is.Equal(got, rows) // folder and glob read both files in key order
			}
			got, err := data.Take(ctx, parquet.Read[record](st.at("out/b.parquet")), 2000)
			is.NoErr(err)
			is.Equal(got, rows[600:])
			n, err := data.Count(ctx, parquet.Read[record](st.at("out")), data.Unordered())
			is.NoErr(err)
			is.Equal(n, int64(1000))
		})
	}
}

// TestReadsParquetGoFiles reads a file that parquet-go wrote by itself,
// from a stream.
func TestReadsParquetGoFiles(t *testing.T) {
	is := is.New(t)
	var buf bytes.Buffer
	is.NoErr(pq.Write(&buf, records(10)))
	src := data.FromStream("stdin", func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	got, err := data.Take(context.Background(), parquet.Read[record](src), 100)
	is.NoErr(err)
	is.Equal(got, records(10))
}

// TestNotParquet fails with a SourceError naming the file.
func TestNotParquet(t *testing.T) {
	is := is.New(t)
	path := filepath.Join(t.TempDir(), "x.parquet")
	is.NoErr(os.WriteFile(path, []byte("not parquet at all"), 0o644))
	_, err := data.Count(context.Background(), parquet.Read[record](data.LocalFiles(path)))
	var se *data.SourceError
	is.True(errors.As(err, &se))
	is.True(strings.Contains(err.Error(), "x.parquet"))
}

// TestFailedWriteLeavesNothing: a run that fails writes no file.
func TestFailedWriteLeavesNothing(t *testing.T) {
	is := is.New(t)
	path := filepath.Join(t.TempDir(), "out.parquet")
	boom := errors.New("boom")
	d := data.Map(data.FromItems(records(100)), func(_ context.Context, r record) (record, error) {
		if r.ID == 50 {
			return r, boom
		}
		return r, nil
	})
	is.True(errors.Is(parquet.Write(context.Background(), d, data.LocalFiles(path)), boom))
	_, err := os.Stat(path)
	is.True(errors.Is(err, os.ErrNotExist))
}

type dated struct {
	ID    int        `parquet:"id"`
	Day   time.Time  `parquet:"day,date"`
	Maybe *time.Time `parquet:"maybe,date,optional"`
	At    time.Time  `parquet:"at"`
}

// datedRaw reads the DATE columns as their int32 days.
type datedRaw struct {
	ID    int    `parquet:"id"`
	Day   int32  `parquet:"day,date"`
	Maybe *int32 `parquet:"maybe,date,optional"`
}

// A time.Time field with the date tag is stored as Parquet's DATE, the
// days since 1970-01-01 (apache/parquet-format LogicalTypes.md), and
// reads back as the same date; NULL stays NULL, dates before 1970 are
// negative.
func TestWriteDate(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	before := time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := []dated{{ID: 1, Day: day, Maybe: &before, At: at}, {ID: 2, Day: before, At: at}}
	out := data.LocalFiles(filepath.Join(dir, "d.parquet"))
	is.NoErr(parquet.Write(ctx, data.FromItems(rows), out))

	got, err := data.Take(ctx, parquet.Read[dated](out), 10)
	is.NoErr(err)
	is.Equal(len(got), 2)
	is.True(got[0].Day.Equal(day))
	is.True(got[0].Maybe != nil && got[0].Maybe.Equal(before))
	is.True(got[1].Day.Equal(before))
	is.True(got[1].Maybe == nil)
	is.True(got[0].At.Equal(at))

	raw, err := data.Take(ctx, parquet.Read[datedRaw](out), 10)
	is.NoErr(err)
	is.Equal(raw[0].Day, int32(20455)) // days from 1970-01-01 to 2026-01-02
	is.Equal(*raw[0].Maybe, int32(-1))
	is.Equal(raw[1].Day, int32(-1))
	is.True(raw[1].Maybe == nil)
}

type badTag struct {
	V float64 `parquet:"v,decimal(2:9)"`
}

// A struct tag parquet-go cannot use (it panics on it) is an error from
// the run, for reading and for writing; the program goes on.
func TestBadTagIsAnError(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	out := data.LocalFiles(filepath.Join(dir, "r.parquet"))
	is.NoErr(parquet.Write(ctx, data.FromItems(records(3)), out))

	n, err := data.Count(ctx, parquet.Read[badTag](out))
	is.True(err != nil)
	t.Log(err)
	is.Equal(n, int64(0))
	var pe *data.PanicError
	is.True(errors.As(err, &pe))

	err = parquet.Write(ctx, data.FromItems([]badTag{{1.5}}), data.LocalFiles(filepath.Join(dir, "w.parquet")))
	is.True(err != nil)
	t.Log(err)
	_, serr := os.Stat(filepath.Join(dir, "w.parquet"))
	is.True(os.IsNotExist(serr)) // nothing written
}

// writeRows writes rows to a Parquet file with parquet-go directly.
func writeRows[T any](t *testing.T, path string, rows []T) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pq.NewGenericWriter[T](f)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

type (
	decimalRow struct {
		Price int32 `parquet:"price,decimal(2:9)"`
	}
	priceFloat struct {
		Price float64 `parquet:"price"`
	}
	bigRow struct {
		N int64 `parquet:"n"`
	}
	smallN struct {
		N int32 `parquet:"n"`
	}
	listRow struct {
		Xs []int64 `parquet:"xs,list"`
	}
	plainXs struct {
		Xs []int64 `parquet:"xs"`
	}
	timeRow struct {
		T int64 `parquet:"t,time(microsecond)"`
	}
	durationT struct {
		T time.Duration `parquet:"t"`
	}
	uuidRow struct {
		ID string `parquet:"id,uuid"`
	}
	plainID struct {
		ID string `parquet:"id"`
	}
	nullRow struct {
		V *int64 `parquet:"v,optional"`
	}
	plainV struct {
		V int64 `parquet:"v"`
	}
	extraField struct {
		V     *int64 `parquet:"v,optional"`
		Other string `parquet:"other"`
	}
)

// Reading a file into a row type that does not fit its schema is an error
// naming the file, the column and both types, for every mapping that
// would lose or invent data, instead of wrong values: decimal(9,2) into
// float64 (1.25 read as 125), BIGINT into int32 (wrapped), a LIST into a
// slice without the list tag (read as empty), TIME into time.Duration
// (1000x too small), a UUID into a plain string (no dashes), NULL into a
// non-pointer and a field with no column (both read as zero).
func TestReadRefusesSchemaMismatch(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	one := int64(1)
	check := func(t *testing.T, file string, run func(data.Files) error, want ...string) {
		is := is.New(t)
		err := run(data.LocalFiles(file))
		is.True(errors.Is(err, parquet.ErrSchema))
		t.Log(err)
		for _, w := range append(want, filepath.Base(file)) {
			is.True(strings.Contains(err.Error(), w))
		}
	}
	cases := []struct {
		name  string
		write func(string)
		read  func(data.Files) error
		want  []string
	}{
		{"decimal into float64", func(p string) { writeRows(t, p, []decimalRow{{125}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[priceFloat](f)); return err },
			[]string{"column price", "INT32 (DECIMAL(9,2))", "DOUBLE"}},
		{"BIGINT into int32", func(p string) { writeRows(t, p, []bigRow{{3000000001}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[smallN](f)); return err },
			[]string{"column n", "INT64", "INT32"}},
		{"LIST without the list tag", func(p string) { writeRows(t, p, []listRow{{[]int64{1, 2}}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[plainXs](f)); return err },
			[]string{"column xs", "the file has no such column", "xs.list.element"}},
		{"TIME into Duration", func(p string) { writeRows(t, p, []timeRow{{1000}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[durationT](f)); return err },
			[]string{"column t", "TIME"}},
		{"UUID into string", func(p string) { writeRows(t, p, []uuidRow{{"6ba7b810-9dad-11d1-80b4-00c04fd430c8"}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[plainID](f)); return err },
			[]string{"column id", "UUID"}},
		{"NULL into a non-pointer", func(p string) { writeRows(t, p, []nullRow{{nil}, {&one}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[plainV](f)); return err },
			[]string{"column v", "holds 1 NULL values"}},
		{"field with no column", func(p string) { writeRows(t, p, []nullRow{{&one}}) },
			func(f data.Files) error { _, err := data.Count(ctx, parquet.Read[extraField](f)); return err },
			[]string{"column other", "no such column"}},
	}
	for i, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, fmt.Sprintf("f%d.parquet", i))
			tt.write(file)
			check(t, file, tt.read, tt.want...)
		})
	}
}

// A nullable column that holds no NULL reads into a plain field (as
// DuckDB's and Spark's files, which mark every column nullable, need);
// with one NULL among 5,000 rows in another row group, it is refused.
func TestNullableColumnWithoutNulls(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	rows := make([]nullRow, 5000)
	for i := range rows {
		v := int64(i)
		rows[i].V = &v
	}
	full := filepath.Join(dir, "full.parquet")
	writeRows(t, full, rows)
	got, err := data.Take(ctx, parquet.Read[plainV](data.LocalFiles(full)), 10000)
	is.NoErr(err)
	is.Equal(len(got), 5000)
	is.Equal(got[4999].V, int64(4999))

	rows[4321].V = nil
	holed := filepath.Join(dir, "holed.parquet")
	writeRows(t, holed, rows)
	_, err = data.Count(ctx, parquet.Read[plainV](data.LocalFiles(holed)))
	is.True(errors.Is(err, parquet.ErrSchema))
	is.True(strings.Contains(err.Error(), "column v: the file's column holds 1 NULL values"))
}

// datedList has a DATE column and a list whose elements may be NULL.
type datedList struct {
	ID   int32      `parquet:"id"`
	Day  time.Time  `parquet:"day,date"`
	Xs   []*int32   `parquet:"xs,list"`
	Tags []string   `parquet:"tags,list"`
	Last *time.Time `parquet:"last,date,optional"`
}

// A row with both a date-tagged time.Time and a list of nullable elements
// writes and reads back (the date encoder used to fail on it with "cannot
// create parquet value of type INT32 from go value of type *int32").
func TestWriteDateWithNullableList(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	out := data.LocalFiles(filepath.Join(t.TempDir(), "dl.parquet"))
	one, three := int32(1), int32(3)
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	before := time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	rows := []datedList{
		{ID: 1, Day: day, Xs: []*int32{&one, nil, &three}, Tags: []string{"a", "b"}, Last: &before},
		{ID: 2, Day: before, Xs: []*int32{}, Tags: nil},
		{ID: 3, Day: day, Xs: []*int32{nil}, Tags: []string{""}, Last: &day},
	}
	is.NoErr(parquet.Write(ctx, data.FromItems(rows), out))

	got, err := data.Take(ctx, parquet.Read[datedList](out), 10)
	is.NoErr(err)
	is.Equal(len(got), 3)
	for i, g := range got {
		w := rows[i]
		is.Equal(g.ID, w.ID)
		is.True(g.Day.Equal(w.Day))
		is.Equal(len(g.Xs), len(w.Xs))
		for k := range w.Xs {
			is.Equal(g.Xs[k] == nil, w.Xs[k] == nil)
			if w.Xs[k] != nil {
				is.Equal(*g.Xs[k], *w.Xs[k])
			}
		}
		is.Equal(len(g.Tags), len(w.Tags))
		for k := range w.Tags {
			is.Equal(g.Tags[k], w.Tags[k])
		}
		is.Equal(g.Last == nil, w.Last == nil)
		if w.Last != nil {
			is.True(g.Last.Equal(*w.Last))
		}
	}
}

type embeddedID struct {
	ID int32 `parquet:"id"`
}

// datedEmbedded embeds a struct: the date is written by deconstructing
// rows (a run-time mirror type cannot embed), still as days.
type datedEmbedded struct {
	embeddedID
	Day time.Time `parquet:"day,date"`
}

type datedEmbeddedRaw struct {
	ID  int32 `parquet:"id"`
	Day int32 `parquet:"day,date"`
}

func TestWriteDateEmbedded(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	out := data.LocalFiles(filepath.Join(t.TempDir(), "e.parquet"))
	day := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	is.NoErr(parquet.Write(ctx, data.FromItems([]datedEmbedded{{embeddedID{7}, day}}), out))
	raw, err := data.Take(ctx, parquet.Read[datedEmbeddedRaw](out), 10)
	is.NoErr(err)
	is.Equal(raw, []datedEmbeddedRaw{{ID: 7, Day: 20455}})
}
