package ray

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
)

var (
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	errorType       = reflect.TypeFor[error]()
)

// checkCrossable reports why values of type t cannot cross a process or
// network boundary through the codec intact, or nil. The codec is
// encoding/json's (JSON, and the fast paths that agree with it), so a type
// that marshals itself (json.Marshaler and json.Unmarshaler, or
// encoding.TextMarshaler and TextUnmarshaler) is taken as it is; otherwise
// an unexported struct field (which arrives as its zero value) unless it
// is tagged `ray:"-"` (left out on purpose), a channel,
// a function, a complex number, an error or another non-empty interface
// (which cannot be decoded) is refused, naming where in t it is.
func checkCrossable(t reflect.Type) error {
	return crossable(t, "", map[reflect.Type]bool{})
}

func marshalsItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return (t.Implements(jsonMarshaler) || p.Implements(jsonMarshaler)) && p.Implements(jsonUnmarshaler) ||
		(t.Implements(textMarshaler) || p.Implements(textMarshaler)) && p.Implements(textUnmarshaler)
}

// crossable checks t; where names the struct field t is the type of
// (with its element, key or value), or is "" at the top.
func crossable(t reflect.Type, where string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	path := t.String()
	if where != "" {
		path = where + " (" + t.String() + ")"
	}
	seen[t] = true
	if marshalsItself(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return nil
	case reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("%s is a complex number, which JSON cannot encode", path)
	case reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return fmt.Errorf("%s is a %s, which cannot cross to another process", path, t.Kind())
	case reflect.Interface:
		if t == errorType {
			return fmt.Errorf("%s is an error, which cannot be decoded on the other side; send its message as a string", path)
		}
		if t.NumMethod() > 0 {
			return fmt.Errorf("%s is the interface %s, which cannot be decoded on the other side; use a concrete type", path, t)
		}
		return nil // any: decoded as JSON's own values
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return crossable(t.Elem(), where, seen)
	case reflect.Map:
		k := t.Key()
		switch k.Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		default:
			if !reflect.PointerTo(k).Implements(textUnmarshaler) {
				return fmt.Errorf("%s has keys of type %s, which JSON cannot use as object keys", path, k)
			}
		}
		return crossable(t.Elem(), where, seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Tag.Get("json") == "-" || f.Tag.Get("ray") == "-" {
				continue // left out on purpose
			}
			if !f.IsExported() {
				if f.Anonymous && f.Type.Kind() == reflect.Struct {
					if err := crossable(f.Type, "field "+t.String()+"."+f.Name, seen); err != nil {
						return err // its exported fields are promoted
					}
					continue
				}
				return fmt.Errorf("field %s.%s is unexported, so it would arrive as its zero value; export it, tag it `ray:\"-\"` to leave it out on purpose, or implement json.Marshaler and json.Unmarshaler", t, f.Name)
			}
			if err := crossable(f.Type, "field "+t.String()+"."+f.Name, seen); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s is of kind %s, which the codec does not support", path, t.Kind())
}

// mustCross panics at registration when a task's or method's input or
// output type cannot cross intact (checkCrossable).
func mustCross(what, role string, t reflect.Type) {
	if err := checkCrossable(t); err != nil {
		panic(fmt.Sprintf("ray: %s: its %s type %s cannot cross between processes: %v", what, role, t, err))
	}
}
