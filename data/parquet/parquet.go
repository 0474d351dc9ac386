// Package parquet reads and writes Parquet files in goray datasets (package
// data) with github.com/parquet-go/parquet-go.
//
//	reviews := parquet.Read[Review](data.LocalFiles("reviews/*.parquet"))
//	scores := data.Map(reviews, score)
//	err := parquet.Write(ctx, scores, data.LocalFiles("scores.parquet"))
//
// Rows are structs whose fields map to columns by `parquet:"name"` tag or
// field name. It is a module of its own
// (github.com/goray-dev/goray/data/parquet) so that programs that do not
// use Parquet do not build parquet-go and its compression codecs; it plugs
// in through data.ReadFiles and data.WriteFile like any other format.
package parquet

import (
	"context"
	"io"

	pq "github.com/parquet-go/parquet-go"

	"github.com/goray-dev/goray/data"
)

// batchRows is how many rows a read asks parquet-go for at a time.
const batchRows = 256

// Read reads Parquet files into rows of type T, a struct whose fields map
// to columns by `parquet:"name"` tag or name. Files are named as for every
// source of package data: a file, a folder or a glob, on the local disk, in
// a bucket or from a stream (read into memory first: Parquet needs random
// access). Each file is read through range reads, footer first.
func Read[T any](files data.Files, opts ...data.Option) *data.Dataset[T] {
	return data.ReadFiles("read_parquet", files, func(ctx context.Context, f data.File, rows data.RowWriter[T]) error {
		ra, done, err := f.ReaderAt(ctx)
		if err != nil {
			return rows.Failed(ctx, data.Pos{Source: f.Name()}, err)
		}
		defer done()
		pf, err := pq.OpenFile(ra, ra.Size())
		if err != nil {
			return rows.Failed(ctx, data.Pos{Source: f.Name()}, err)
		}
		pr := pq.NewGenericReader[T](pf)
		defer pr.Close()
		var row int64
		for {
			buf := make([]T, batchRows) // fresh each time: rows may share the buffer's memory
			n, err := pr.Read(buf)
			for i := range n {
				if err := rows.Put(buf[i], data.Pos{Source: f.Name(), Row: row}); err != nil {
					return err
				}
				row++
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return rows.Failed(ctx, data.Pos{Source: f.Name(), Row: row}, err)
			}
		}
	}, opts...)
}

// Write runs d and writes its rows to one Parquet file, atomically: the
// file appears, complete, only when the run succeeds. T is a struct; the
// file's schema comes from its fields and `parquet` tags.
func Write[T any](ctx context.Context, d *data.Dataset[T], to data.Files, opts ...data.Option) error {
	return data.WriteFile(ctx, d, to, func(w io.Writer) (data.Encoder[T], error) {
		return encoder[T]{pq.NewGenericWriter[T](w)}, nil
	}, opts...)
}

type encoder[T any] struct{ w *pq.GenericWriter[T] }

func (e encoder[T]) Write(rows []T) error {
	_, err := e.w.Write(rows)
	return err
}

func (e encoder[T]) Close() error { return e.w.Close() }
