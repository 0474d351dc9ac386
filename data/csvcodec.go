package data

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/backend"
)

// csvCodec maps CSV records to rows of type T and back. T is []string (a
// record as it is, no header), map[string]string (header → value), or a
// struct whose fields of kind string, bool, int*, uint* or float*, or
// pointers to them, are matched to columns by their `csv:"name"` tag, else
// by field name; a tag of "-" skips a field.
//
// CSV has no NULL of its own; like PostgreSQL's COPY and DuckDB, an empty
// field without quotes is NULL and a quoted empty field ("") is the empty
// string. Reading, NULL is a nil pointer, "" for a string field, and an
// error for a bool or number field; writing, a nil pointer is an empty
// field and an empty string is "".
type csvCodec[T any] struct {
	kind   csvKind
	fields []csvField // struct: by column order of the struct
}

type csvKind int

const (
	csvRecord csvKind = iota
	csvMap
	csvStruct
)

type csvField struct {
	name  string
	index int
	kind  reflect.Kind // of the value, behind the pointer for ptr fields
	ptr   bool
}

func newCSVCodec[T any]() (*csvCodec[T], error) {
	t := reflect.TypeFor[T]()
	switch {
	case t == reflect.TypeFor[[]string]():
		return &csvCodec[T]{kind: csvRecord}, nil
	case t == reflect.TypeFor[map[string]string]():
		return &csvCodec[T]{kind: csvMap}, nil
	case t.Kind() != reflect.Struct:
		return nil, backend.Errorf(backend.InvalidArgument, "", "data: CSV rows must be []string, map[string]string or a struct, not %v", t)
	}
	c := &csvCodec[T]{kind: csvStruct}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("csv"); ok {
			if tag == "-" {
				continue
			}
			name, _, _ = strings.Cut(tag, ",")
		}
		ft, ptr := f.Type, f.Type.Kind() == reflect.Pointer
		if ptr {
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		default:
			return nil, backend.Errorf(backend.InvalidArgument, "", "data: CSV field %s.%s is %v; valid kinds are string, bool, ints, uints and floats, or pointers to them (tag it csv:\"-\" to skip it)", t, f.Name, f.Type)
		}
		c.fields = append(c.fields, csvField{name: name, index: i, kind: ft.Kind(), ptr: ptr})
	}
	return c, nil
}

// hasHeader says whether the first record names the columns.
func (c *csvCodec[T]) hasHeader() bool { return c.kind != csvRecord }

// decoder binds the codec to a file's header. null(i) says whether field i
// of the record is NULL (empty, not quoted).
func (c *csvCodec[T]) decoder(header []string) func(rec []string, null func(int) bool) (T, error) {
	switch c.kind {
	case csvRecord:
		return func(rec []string, _ func(int) bool) (T, error) {
			var v T
			reflect.ValueOf(&v).Elem().Set(reflect.ValueOf(append([]string(nil), rec...)))
			return v, nil
		}
	case csvMap:
		return func(rec []string, _ func(int) bool) (T, error) {
			m := make(map[string]string, len(header))
			for i, h := range header {
				if i < len(rec) {
					m[h] = rec[i]
				}
			}
			var v T
			reflect.ValueOf(&v).Elem().Set(reflect.ValueOf(m))
			return v, nil
		}
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	return func(rec []string, null func(int) bool) (T, error) {
		var v T
		rv := reflect.ValueOf(&v).Elem()
		for _, f := range c.fields {
			i, ok := col[f.name]
			if !ok || i >= len(rec) {
				continue
			}
			fv := rv.Field(f.index)
			switch {
			case null(i) && f.ptr:
				continue // nil
			case null(i) && f.kind != reflect.String:
				return v, fmt.Errorf("column %q: NULL (an empty field) does not fit %v; make the field a pointer (*%v) to read NULL as nil", f.name, fv.Type(), fv.Type())
			case f.ptr:
				fv.Set(reflect.New(fv.Type().Elem()))
				fv = fv.Elem()
			}
			if err := setField(fv, f.kind, rec[i]); err != nil {
				return v, fmt.Errorf("column %q: %w", f.name, err)
			}
		}
		return v, nil
	}
}

func setField(v reflect.Value, kind reflect.Kind, s string) error {
	switch kind {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetFloat(n)
	}
	return nil
}

// header is the header line for writing, nil for []string rows; map rows
// take the sorted keys of the first row.
func (c *csvCodec[T]) header(first T) []string {
	switch c.kind {
	case csvRecord:
		return nil
	case csvMap:
		m := reflect.ValueOf(first)
		keys := make([]string, 0, m.Len())
		for _, k := range m.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		return keys
	}
	h := make([]string, len(c.fields))
	for i, f := range c.fields {
		h[i] = f.name
	}
	return h
}

// encode turns a row into a record in header order, with null[i] set
// where field i is NULL (a nil pointer, or a key a map row lacks).
func (c *csvCodec[T]) encode(header []string, row T, null []bool) []string {
	rv := reflect.ValueOf(row)
	switch c.kind {
	case csvRecord:
		return rv.Interface().([]string)
	case csvMap:
		rec := make([]string, len(header))
		for i, h := range header {
			if v := rv.MapIndex(reflect.ValueOf(h)); v.IsValid() {
				rec[i] = v.String()
			} else {
				null[i] = true
			}
		}
		return rec
	}
	rec := make([]string, len(c.fields))
	for i, f := range c.fields {
		fv := rv.Field(f.index)
		if f.ptr {
			if fv.IsNil() {
				null[i] = true
				continue
			}
			fv = fv.Elem()
		}
		switch f.kind {
		case reflect.String:
			rec[i] = fv.String()
		case reflect.Bool:
			rec[i] = strconv.FormatBool(fv.Bool())
		case reflect.Float32, reflect.Float64:
			rec[i] = strconv.FormatFloat(fv.Float(), 'g', -1, fv.Type().Bits())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			rec[i] = strconv.FormatUint(fv.Uint(), 10)
		default:
			rec[i] = strconv.FormatInt(fv.Int(), 10)
		}
	}
	return rec
}
