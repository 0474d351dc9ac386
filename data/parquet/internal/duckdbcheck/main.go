// Command duckdbcheck writes Parquet, CSV and JSON Lines files with goray
// for scripts/duckdb-check.sh, which reads them with DuckDB (an independent
// implementation) and compares every value with the rows below.
package main

import (
	"context"
	"flag"
	"log"
	"path/filepath"
	"time"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/data/parquet"
)

// row is written to goray.parquet; scripts/duckdb-check.mjs expects these
// values, with DuckDB's types for the tags.
type row struct {
	ID    int32     `parquet:"id"`
	Big   int64     `parquet:"big"`
	Price int32     `parquet:"price,decimal(2:9)"` // hundredths
	F     float64   `parquet:"f"`
	Name  string    `parquet:"name"`
	Note  *string   `parquet:"note,optional"`
	Day   time.Time `parquet:"day,date"`
	At    time.Time `parquet:"at,timestamp(microsecond)"`
	Xs    []int64   `parquet:"xs,list"`
	UID   string    `parquet:"uid,uuid"`
	// Ys, a list of nullable elements next to the date column, once
	// failed to write (parquet-go panicked on its *int64 elements).
	Ys []*int64 `parquet:"ys,list"`
}

// text is written to goray.csv and goray.jsonl.
type text struct {
	ID    int     `csv:"id" json:"id"`
	Name  string  `csv:"name" json:"name"`
	Note  *string `csv:"note" json:"note"`
	Maybe *int    `csv:"maybe" json:"maybe"`
}

func main() {
	dir := flag.String("dir", "", "folder to write the files in")
	flag.Parse()
	if *dir == "" {
		log.Fatal("duckdbcheck: -dir is required")
	}
	ctx := context.Background()
	x, empty, seven := "x", "", 7
	y1, y3 := int64(1), int64(-3)
	rows := []row{
		{ID: 1, Big: 3000000001, Price: 125, F: 0.5, Name: "plain", Note: &x,
			Day: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), At: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC),
			Xs: []int64{1, 2, 3}, UID: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", Ys: []*int64{&y1, nil, &y3}},
		{ID: 2, Big: -1, Price: -1, F: -2.25, Name: "line\r\nbreak, \"quoted\" ünïcode",
			Day: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), At: time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
			Xs: []int64{}, UID: "00000000-0000-0000-0000-000000000000", Ys: []*int64{nil}},
	}
	if err := parquet.Write(ctx, data.FromItems(rows), data.LocalFiles(filepath.Join(*dir, "goray.parquet"))); err != nil {
		log.Fatal(err)
	}
	texts := []text{
		{ID: 1, Name: "plain", Note: &x, Maybe: &seven},
		{ID: 2, Name: "line\r\nbreak, \"quoted\" ünïcode"},
		{ID: 3, Name: "", Note: &empty},
	}
	if err := data.WriteCSV(ctx, data.FromItems(texts), data.LocalFiles(filepath.Join(*dir, "goray.csv"))); err != nil {
		log.Fatal(err)
	}
	if err := data.WriteJSONL(ctx, data.FromItems(texts), data.LocalFiles(filepath.Join(*dir, "goray.jsonl"))); err != nil {
		log.Fatal(err)
	}
}
