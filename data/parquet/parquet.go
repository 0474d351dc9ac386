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
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/goray-dev/goray/data"
)

// ErrSchema is matched (errors.Is) by the error of a read whose row type
// does not fit a file's schema; the error names the file, the columns and
// both types.
var ErrSchema = errors.New("parquet: the file's schema does not fit the row type")

// batchRows is how many rows a read asks parquet-go for at a time.
const batchRows = 256

// Read reads Parquet files into rows of type T, a struct whose fields map
// to columns by `parquet:"name"` tag or name. Before it reads a file it
// checks T against the file's schema: a field with no column, a column
// whose physical or logical type differs from the field's (BIGINT into
// int32, decimal(9,2) into float64, TIME into time.Duration, a UUID into
// string, a LIST into a slice without the list tag), or a column holding
// NULLs into a field that cannot hold NULL (not a pointer) fails the run
// with an error naming the file, the column and both types, instead of
// reading wrong values. A nullable column that holds no NULL (writers such
// as DuckDB and Spark mark every column nullable) reads into a plain
// field; a TIMESTAMP without UTC adjustment reads into a time.Time as that
// wall-clock time in UTC. Files are named as for every
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
		if err := checkSchema(pq.SchemaOf(new(T)), pf.Schema(), lostNulls(pf)); err != nil {
			return rows.Failed(ctx, data.Pos{Source: f.Name()}, fmt.Errorf("%w %T: %w", ErrSchema, *new(T), err))
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
//
// A time.Time (or *time.Time) field tagged `parquet:"name,date"` is
// stored as Parquet's DATE, the days since 1970-01-01 of its UTC date
// (parquet-go v0.32 on its own stores the nanoseconds since the epoch cut
// to 32 bits, which no reader, parquet-go included, reads back as the
// date). Such rows may have any other field, lists of nullable elements
// included; a row type with an embedded struct and a date field is
// written through parquet-go's row deconstruction, which cannot write a
// list of nullable elements.
func Write[T any](ctx context.Context, d *data.Dataset[T], to data.Files, opts ...data.Option) error {
	return data.WriteFile(ctx, d, to, func(w io.Writer) (data.Encoder[T], error) {
		schema := pq.SchemaOf(new(T))
		dates := dateColumns[T](schema)
		if len(dates) == 0 {
			return encoder[T]{pq.NewGenericWriter[T](w, schema)}, nil
		}
		if m, ok := newMirrorEncoder[T](w, schema, dates); ok {
			return m, nil
		}
		return &dateEncoder[T]{w: pq.NewWriter(w, schema), schema: schema, dates: dates}, nil
	}, opts...)
}

type encoder[T any] struct{ w *pq.GenericWriter[T] }

func (e encoder[T]) Write(rows []T) error {
	_, err := e.w.Write(rows)
	return err
}

func (e encoder[T]) Close() error { return e.w.Close() }

// dateColumn is a top-level time.Time or *time.Time field of a row struct
// written as a DATE column.
type dateColumn struct {
	field  []int // reflect field index
	column int   // leaf column index in the schema
}

// dateColumns finds the DATE columns of T (whose schema is schema) that
// hold time.Time values.
func dateColumns[T any](schema *pq.Schema) []dateColumn {
	rt := reflect.TypeFor[T]()
	if rt.Kind() != reflect.Struct {
		return nil
	}
	var out []dateColumn
	for _, f := range reflect.VisibleFields(rt) {
		if !f.IsExported() || len(f.Index) != 1 {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		if name == "-" || !slices.Contains(strings.Split(opts, ","), "date") {
			continue
		}
		if t := f.Type; t != timeType && !(t.Kind() == reflect.Pointer && t.Elem() == timeType) {
			continue
		}
		if name == "" {
			name = f.Name
		}
		leaf, ok := schema.Lookup(name)
		if !ok {
			continue
		}
		out = append(out, dateColumn{field: f.Index, column: leaf.ColumnIndex})
	}
	return out
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	int32Type  = reflect.TypeFor[int32]()
	int32PType = reflect.TypeFor[*int32]()
)

// mirrorEncoder writes rows of T with DATE columns through a struct type
// made at run time with T's exported fields and tags, each date field's
// time.Time (*time.Time) replaced by the int32 (*int32) of its days since
// the epoch, which parquet-go writes as DATE as it is. (Deconstructing
// the rows into parquet.Row values instead fails on a list of nullable
// elements in parquet-go v0.32: "cannot create parquet value of type
// INT32 from go value of type *int32".)
type mirrorEncoder[T any] struct {
	w      *pq.GenericWriter[any]
	mirror reflect.Type
	fields []mirrorField
	buf    []any
}

// mirrorField is a field of the mirror struct: the index of T's field it
// is copied from, and whether it is a date converted to days.
type mirrorField struct {
	from int
	date bool
}

// newMirrorEncoder builds the mirror of T, or says it cannot (T has an
// embedded field, or the mirror's schema differs from T's), in which case
// the rows are deconstructed one by one instead.
func newMirrorEncoder[T any](w io.Writer, schema *pq.Schema, dates []dateColumn) (*mirrorEncoder[T], bool) {
	rt := reflect.TypeFor[T]()
	isDate := make(map[int]bool, len(dates))
	for _, d := range dates {
		isDate[d.field[0]] = true
	}
	var sfs []reflect.StructField
	var fields []mirrorField
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Anonymous {
			return nil, false
		}
		if !f.IsExported() {
			continue
		}
		sf := reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag}
		if isDate[i] {
			sf.Type = int32Type
			if f.Type.Kind() == reflect.Pointer {
				sf.Type = int32PType
			}
		}
		sfs = append(sfs, sf)
		fields = append(fields, mirrorField{from: i, date: isDate[i]})
	}
	var mirror reflect.Type
	ok := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		mirror = reflect.StructOf(sfs)
		return pq.EqualNodes(pq.SchemaOf(reflect.New(mirror).Interface()), schema)
	}()
	if !ok {
		return nil, false
	}
	return &mirrorEncoder[T]{w: pq.NewGenericWriter[any](w, schema), mirror: mirror, fields: fields}, true
}

func (e *mirrorEncoder[T]) Write(rows []T) error {
	clear(e.buf)
	e.buf = e.buf[:0]
	for i := range rows {
		src := reflect.ValueOf(&rows[i]).Elem()
		dst := reflect.New(e.mirror).Elem()
		for j, f := range e.fields {
			fv := src.Field(f.from)
			switch {
			case !f.date:
				dst.Field(j).Set(fv)
			case fv.Kind() != reflect.Pointer:
				dst.Field(j).SetInt(int64(epochDays(fv.Interface().(time.Time))))
			case !fv.IsNil(): // a nil *time.Time stays NULL
				days := epochDays(fv.Elem().Interface().(time.Time))
				dst.Field(j).Set(reflect.ValueOf(&days))
			}
		}
		e.buf = append(e.buf, dst.Interface())
	}
	_, err := e.w.Write(e.buf)
	return err
}

func (e *mirrorEncoder[T]) Close() error { return e.w.Close() }

// dateEncoder writes rows through the schema, storing each DATE column of
// a time.Time as the days since the epoch.
type dateEncoder[T any] struct {
	w      *pq.Writer
	schema *pq.Schema
	dates  []dateColumn
	rows   []pq.Row
}

func (e *dateEncoder[T]) Write(rows []T) error {
	e.rows = e.rows[:0]
	for i := range rows {
		r := e.schema.Deconstruct(nil, &rows[i])
		v := reflect.ValueOf(&rows[i]).Elem()
		for _, dc := range e.dates {
			fv := v.FieldByIndex(dc.field)
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue // NULL stays NULL
				}
				fv = fv.Elem()
			}
			days := epochDays(fv.Interface().(time.Time))
			for k := range r {
				if r[k].Column() == dc.column {
					r[k] = pq.Int32Value(days).Level(r[k].RepetitionLevel(), r[k].DefinitionLevel(), dc.column)
				}
			}
		}
		e.rows = append(e.rows, r)
	}
	_, err := e.w.WriteRows(e.rows)
	return err
}

func (e *dateEncoder[T]) Close() error { return e.w.Close() }

// epochDays returns the days from 1970-01-01 to t's UTC date, rounded
// down (1969-12-31 is -1).
func epochDays(t time.Time) int32 {
	s := t.Unix()
	d := s / 86400
	if s%86400 < 0 {
		d--
	}
	return int32(d)
}

// checkSchema reports how the row type's schema want differs from a file's
// schema got, for every leaf column of want: missing in got, of another
// type (physical and logical), repeated differently, or holding NULLs
// (counted by lost) where want cannot hold NULL.
func checkSchema(want, got *pq.Schema, lost func(want, got *pq.Schema, path []string) (int64, error)) error {
	var errs []error
	for _, path := range want.Columns() {
		w, _ := want.Lookup(path...)
		name := strings.Join(path, ".")
		g, ok := got.Lookup(path...)
		if !ok {
			errs = append(errs, fmt.Errorf("column %s: the file has no such column (a field with no column would read as its zero value; the file's columns: %s)", name, columnList(got)))
			continue
		}
		wt, gt := typeName(w.Node), typeName(g.Node)
		if wt != gt && !sameInstant(w.Node, g.Node) {
			errs = append(errs, fmt.Errorf("column %s: the file's type is %s, the row's field is %s", name, gt, wt))
			continue
		}
		if w.MaxRepetitionLevel != g.MaxRepetitionLevel {
			errs = append(errs, fmt.Errorf("column %s: repeated %d levels deep in the file, %d in the row type (a LIST needs the list tag)", name, g.MaxRepetitionLevel, w.MaxRepetitionLevel))
			continue
		}
		if g.MaxDefinitionLevel > w.MaxDefinitionLevel {
			// Many writers (DuckDB, Spark) mark every column nullable; a
			// column that holds no NULL where the field cannot reads intact.
			n, err := lost(want, got, path)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("column %s: %w", name, err))
			case n > 0:
				errs = append(errs, fmt.Errorf("column %s: the file's column holds %d NULL values where the row's field cannot hold NULL (make it a pointer, or tag it optional)", name, n))
			}
		}
	}
	return errors.Join(errs...)
}

// sameInstant says whether two TIMESTAMP or TIME columns differ only in
// isAdjustedToUTC: a timestamp without UTC adjustment (SQL's TIMESTAMP
// WITHOUT TIME ZONE, written by DuckDB, Spark and pandas) reads into a
// time.Time as that wall-clock time in UTC, and a time of day as its
// offset from midnight, the same values either way.
func sameInstant(a, b pq.Node) bool {
	la, lb := a.Type().LogicalType(), b.Type().LogicalType()
	if la == nil || lb == nil || a.Type().Kind() != b.Type().Kind() {
		return false
	}
	switch va := la.Value.(type) {
	case *format.TimestampType:
		vb, ok := lb.Value.(*format.TimestampType)
		return ok && va.Unit.String() == vb.Unit.String()
	case *format.TimeType:
		vb, ok := lb.Value.(*format.TimeType)
		return ok && va.Unit.String() == vb.Unit.String()
	}
	return false
}

// lostNulls counts, in a file, the values of the leaf column at path that
// are NULL at a level of the path where the row type cannot hold NULL (an
// optional column or list element read into a field that is neither a
// pointer nor optional). A NULL or empty list is not lost when the list
// itself may be NULL. Column chunk statistics answer first: a chunk that
// records no NULL has none; others have their definition levels read.
func lostNulls(f *pq.File) func(want, got *pq.Schema, path []string) (int64, error) {
	return func(want, got *pq.Schema, path []string) (int64, error) {
		levels := lostLevels(want, got, path)
		if len(levels) == 0 {
			return 0, nil
		}
		leaf, _ := got.Lookup(path...)
		var lost int64
		for i, rg := range f.RowGroups() {
			cc := rg.ColumnChunks()[leaf.ColumnIndex]
			if st := f.Metadata().RowGroups[i].Columns[leaf.ColumnIndex].MetaData.Statistics; hasNullCount(st) && st.NullCount == 0 {
				continue
			}
			n, err := countLevels(cc, levels)
			if err != nil {
				return 0, fmt.Errorf("reading its definition levels: %w", err)
			}
			lost += n
		}
		return lost, nil
	}
}

// hasNullCount says whether a chunk's statistics were written at all (the
// format asks writers to always write null_count, even when zero).
func hasNullCount(st format.Statistics) bool {
	return st.NullCount != 0 || st.MinValue != nil || st.MaxValue != nil || st.Min != nil || st.Max != nil
}

// lostLevels are the definition levels of the leaf at path that mean "NULL
// at a node that is optional in got but required in want".
func lostLevels(want, got *pq.Schema, path []string) []byte {
	var levels []byte
	var def byte // definition level contributed by the nodes above
	wn, gn := pq.Node(want), pq.Node(got)
	for _, name := range path {
		wn, gn = child(wn, name), child(gn, name)
		if wn == nil || gn == nil {
			return levels
		}
		if gn.Optional() && !wn.Optional() {
			levels = append(levels, def)
		}
		if gn.Optional() || gn.Repeated() {
			def++
		}
	}
	return levels
}

func child(n pq.Node, name string) pq.Node {
	for _, f := range n.Fields() {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

// countLevels counts the values of a column chunk whose definition level is
// one of levels.
func countLevels(cc pq.ColumnChunk, levels []byte) (int64, error) {
	pages := cc.Pages()
	defer pages.Close()
	var n int64
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		for _, d := range p.DefinitionLevels() {
			if slices.Contains(levels, d) {
				n++
			}
		}
		pq.Release(p)
	}
}

// typeName is a leaf's physical and logical type, such as "INT32" or
// "INT32 (DECIMAL(9,2))".
func typeName(n pq.Node) string {
	t := n.Type()
	s := t.Kind().String()
	if t.Kind() == pq.FixedLenByteArray {
		s += "(" + strconv.Itoa(t.Length()) + ")"
	}
	switch lt, ct := t.LogicalType(), t.ConvertedType(); {
	case lt != nil && lt.String() != "":
		s += " (" + lt.String() + ")"
	case ct != nil && *ct == deprecated.Interval:
		s += " (INTERVAL)" // a type the format names only as a converted type
	}
	return s
}

func columnList(s *pq.Schema) string {
	var names []string
	for _, p := range s.Columns() {
		names = append(names, strings.Join(p, "."))
	}
	return strings.Join(names, ", ")
}
