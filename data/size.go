package data

import (
	"reflect"
	"unsafe"
)

// sizeOf estimates the bytes that the value at p holds: its own size plus
// what its strings, slices and maps point to, and what its pointers point
// to (followed once each, so cycles end). It is an estimate for the
// in-flight byte cap, not an exact account of the heap.
func sizeOf[T any](p *T) int64 {
	v := reflect.ValueOf(p).Elem()
	return int64(unsafe.Sizeof(*p)) + indirect(v, map[uintptr]bool{})
}

// indirect is the size of what v refers to, not counting v itself.
func indirect(v reflect.Value, seen map[uintptr]bool) int64 {
	switch v.Kind() {
	case reflect.String:
		return int64(v.Len())
	case reflect.Slice:
		if v.IsNil() {
			return 0
		}
		n := int64(v.Cap()) * int64(v.Type().Elem().Size())
		for i := range v.Len() {
			n += indirect(v.Index(i), seen)
		}
		return n
	case reflect.Array:
		var n int64
		for i := range v.Len() {
			n += indirect(v.Index(i), seen)
		}
		return n
	case reflect.Struct:
		var n int64
		for i := range v.NumField() {
			n += indirect(v.Field(i), seen)
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return 0
		}
		kt, et := v.Type().Key(), v.Type().Elem()
		n := int64(v.Len()) * int64(kt.Size()+et.Size())
		it := v.MapRange()
		for it.Next() {
			n += indirect(it.Key(), seen) + indirect(it.Value(), seen)
		}
		return n
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 0
		}
		if v.Kind() == reflect.Pointer {
			if seen[v.Pointer()] {
				return 0
			}
			seen[v.Pointer()] = true
		}
		e := v.Elem()
		return int64(e.Type().Size()) + indirect(e, seen)
	default:
		return 0
	}
}
