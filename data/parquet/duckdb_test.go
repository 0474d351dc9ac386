package parquet_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/data/parquet"
)

// The files under testdata/duckdb were written by DuckDB (an independent
// Parquet implementation; version and how in testdata/duckdb/README.md)
// from the SQL in scripts/duckdb-testdata.mjs. The expectations below are
// that SQL's literals, not goray's output.

// duckTypes reads testdata/duckdb/types.parquet, one field per column with
// the tag that reads it. DuckDB marks every column nullable: the fields
// that are not pointers read columns that hold no NULL.
type duckTypes struct {
	ID    int32     `parquet:"id"`
	Big   int64     `parquet:"big"`
	Small int16     `parquet:"small"`
	Price int32     `parquet:"price,decimal(2:9)"` // hundredths
	F     float64   `parquet:"f"`
	R     float32   `parquet:"r"`
	OK    bool      `parquet:"ok"`
	Name  string    `parquet:"name"`
	Note  *string   `parquet:"note,optional"`
	Day   time.Time `parquet:"day,date"`
	TS    time.Time `parquet:"ts,timestamp(microsecond)"`   // TIMESTAMP: wall clock, read in UTC
	TSTZ  time.Time `parquet:"tstz,timestamp(microsecond)"` // TIMESTAMPTZ
	Xs    []int64   `parquet:"xs,list,optional"`
	UID   string    `parquet:"uid,uuid,optional"`     // NULL reads as ""
	Tod   int64     `parquet:"tod,time(microsecond)"` // microseconds since midnight
	Maybe *int32    `parquet:"maybe,optional"`
}

func ptr[T any](v T) *T { return &v }

func TestReadsDuckDBTypes(t *testing.T) {
	is := is.New(t)
	got, err := data.Take(context.Background(), parquet.Read[duckTypes](data.LocalFiles("testdata/duckdb/types.parquet")), 10)
	is.NoErr(err)
	utc := func(y int, mo time.Month, d, h, mi, s, us int) time.Time {
		return time.Date(y, mo, d, h, mi, s, us*1000, time.UTC)
	}
	want := []duckTypes{
		{ID: 1, Big: 3000000001, Small: -7, Price: 125, F: 0.5, R: 1.5, OK: true, Name: "plain", Note: ptr("x"),
			Day: utc(2026, 1, 2, 0, 0, 0, 0), TS: utc(2026, 1, 2, 3, 4, 5, 123456), TSTZ: utc(2026, 1, 2, 3, 4, 5, 500000),
			Xs: []int64{1, 2, 3}, UID: "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
			Tod: ((12*60+34)*60+56)*1e6 + 789000, Maybe: ptr[int32](42)},
		{ID: 2, Big: -1, Small: 32767, Price: -1, F: -2.25, R: 0, OK: false, Name: "line\r\nbreak, \"quoted\" ünïcode",
			Day: utc(1969, 12, 31, 0, 0, 0, 0), TS: utc(1970, 1, 1, 0, 0, 0, 0), TSTZ: utc(1999, 12, 31, 23, 59, 59, 0),
			Xs: []int64{}, UID: "00000000-0000-0000-0000-000000000000", Tod: 0},
		{ID: 3, Name: "", Note: ptr(""), R: -1,
			Day: utc(1, 1, 1, 0, 0, 0, 0), TS: utc(2262, 4, 11, 0, 0, 0, 0), TSTZ: utc(1970, 1, 1, 0, 0, 0, 0),
			Tod: ((23*60+59)*60+59)*1e6 + 999999, Maybe: ptr[int32](7)},
	}
	is.Equal(len(got), len(want))
	for i := range want {
		g, w := got[i], want[i]
		is.True(g.Day.Equal(w.Day) && g.TS.Equal(w.TS) && g.TSTZ.Equal(w.TSTZ)) // times
		g.Day, g.TS, g.TSTZ, w.Day, w.TS, w.TSTZ = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		is.Equal(len(g.Xs), len(w.Xs)) // a NULL list and an empty one both read as no elements
		g.Xs, w.Xs = nil, nil
		is.Equal(g, w)
	}
}

// manyRow reads testdata/duckdb/many.parquet: 10,000 rows in row groups of
// 2,048, zstd pages, a dictionary-encoded string column and a column with
// NULLs, made from range(10000).
type manyRow struct {
	I       int64    `parquet:"i"`
	S       string   `parquet:"s"`
	Seventh bool     `parquet:"seventh"`
	F       *float64 `parquet:"f,optional"`
}

func TestReadsDuckDBRowGroups(t *testing.T) {
	is := is.New(t)
	var n int64
	for r, err := range data.Rows(context.Background(), parquet.Read[manyRow](data.LocalFiles("testdata/duckdb/many.parquet"), data.BlockRows(300))) {
		is.NoErr(err)
		i := r.I
		is.Equal(i, n) // in file order
		is.Equal(r.S, "row "+strconv.FormatInt(i%100, 10))
		is.Equal(r.Seventh, i%7 == 0)
		if i%5 == 0 {
			is.True(r.F == nil)
		} else {
			is.True(r.F != nil && *r.F == float64(i)*1.5)
		}
		n++
	}
	is.Equal(n, int64(10000))
}

// Mappings that would lose data from DuckDB's files are refused, naming the
// column; those that lose nothing read (above).
func TestRefusesDuckDBMappingsThatLoseData(t *testing.T) {
	ctx := context.Background()
	type priceFloat struct {
		Price float64 `parquet:"price"`
	}
	type wideFloat struct {
		Wide float64 `parquet:"wide"`
	}
	type nullableIntoPlain struct {
		N int32 `parquet:"n"`
	}
	type nullElements struct {
		Xs []int64 `parquet:"xs,list"`
	}
	type naiveMillis struct {
		TS time.Time `parquet:"ts,timestamp(millisecond)"`
	}
	type intervalDuration struct {
		IV time.Duration `parquet:"iv"`
	}
	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		{"decimal(9,2) into float64", func() error {
			_, err := data.Count(ctx, parquet.Read[priceFloat](data.LocalFiles("testdata/duckdb/types.parquet")))
			return err
		}, []string{"column price", "DECIMAL(9,2)", "DOUBLE"}},
		{"decimal(38,4) into float64", func() error {
			_, err := data.Count(ctx, parquet.Read[wideFloat](data.LocalFiles("testdata/duckdb/types.parquet")))
			return err
		}, []string{"column wide", "DECIMAL(38,4)", "DOUBLE"}},
		{"a NULL into a plain field", func() error {
			_, err := data.Count(ctx, parquet.Read[nullableIntoPlain](data.LocalFiles("testdata/duckdb/nulls.parquet")))
			return err
		}, []string{"column n", "holds 1 NULL values"}},
		{"a NULL list element into []int64", func() error {
			_, err := data.Count(ctx, parquet.Read[nullElements](data.LocalFiles("testdata/duckdb/nulls.parquet")))
			return err
		}, []string{"column xs.list.element", "holds 1 NULL values"}},
		{"INTERVAL into time.Duration", func() error {
			_, err := data.Count(ctx, parquet.Read[intervalDuration](data.LocalFiles("testdata/duckdb/interval.parquet")))
			return err
		}, []string{"column iv", "INTERVAL", "INT64"}},
		{"microseconds into milliseconds", func() error {
			_, err := data.Count(ctx, parquet.Read[naiveMillis](data.LocalFiles("testdata/duckdb/types.parquet")))
			return err
		}, []string{"column ts", "unit=MICROS", "unit=MILLIS"}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			err := tt.run()
			is.True(errors.Is(err, parquet.ErrSchema))
			t.Log(err)
			for _, w := range tt.want {
				is.True(strings.Contains(err.Error(), w))
			}
		})
	}
}
