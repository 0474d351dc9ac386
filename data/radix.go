package data

import (
	"cmp"
	"math"
	"reflect"
	"unsafe"
)

// radixKeyOf returns, for key types that are integers or floating-point
// numbers, a function that maps a key to a uint64 whose unsigned order is
// cmp.Compare's order of the keys (reversed when desc): signed integers
// with the sign bit flipped, floats by their bits with negatives
// inverted, every NaN first (as cmp.Compare puts it) and -0 equal to +0.
// Keys that compare equal map to the same value, so a stable sort of the
// mapped values is a stable sort of the keys. nil for other types
// (strings).
func radixKeyOf[K cmp.Ordered](desc bool) func(k *K) uint64 {
	var f func(k *K) uint64
	t := reflect.TypeFor[K]()
	switch t.Kind() {
	case reflect.Int8:
		f = func(k *K) uint64 { return uint64(int64(*(*int8)(unsafe.Pointer(k)))) ^ 1<<63 }
	case reflect.Int16:
		f = func(k *K) uint64 { return uint64(int64(*(*int16)(unsafe.Pointer(k)))) ^ 1<<63 }
	case reflect.Int32:
		f = func(k *K) uint64 { return uint64(int64(*(*int32)(unsafe.Pointer(k)))) ^ 1<<63 }
	case reflect.Int64, reflect.Int:
		if t.Size() == 8 {
			f = func(k *K) uint64 { return uint64(*(*int64)(unsafe.Pointer(k))) ^ 1<<63 }
		} else {
			f = func(k *K) uint64 { return uint64(int64(*(*int32)(unsafe.Pointer(k)))) ^ 1<<63 }
		}
	case reflect.Uint8:
		f = func(k *K) uint64 { return uint64(*(*uint8)(unsafe.Pointer(k))) }
	case reflect.Uint16:
		f = func(k *K) uint64 { return uint64(*(*uint16)(unsafe.Pointer(k))) }
	case reflect.Uint32:
		f = func(k *K) uint64 { return uint64(*(*uint32)(unsafe.Pointer(k))) }
	case reflect.Uint64, reflect.Uint, reflect.Uintptr:
		if t.Size() == 8 {
			f = func(k *K) uint64 { return *(*uint64)(unsafe.Pointer(k)) }
		} else {
			f = func(k *K) uint64 { return uint64(*(*uint32)(unsafe.Pointer(k))) }
		}
	case reflect.Float32:
		f = func(k *K) uint64 { return floatKey(float64(*(*float32)(unsafe.Pointer(k)))) }
	case reflect.Float64:
		f = func(k *K) uint64 { return floatKey(*(*float64)(unsafe.Pointer(k))) }
	default:
		return nil
	}
	if desc {
		g := f
		f = func(k *K) uint64 { return ^g(k) }
	}
	return f
}

// floatKey maps x to a uint64 in cmp.Compare's order: NaN (any) is 0,
// below -Inf; -0 is +0.
func floatKey(x float64) uint64 {
	if x != x {
		return 0
	}
	if x == 0 {
		x = 0 // -0 compares equal to +0
	}
	b := math.Float64bits(x)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

// radixItem is a key mapped by radixKeyOf and the index of its row.
type radixItem struct {
	k uint64
	i uint32
}

// radixOrder returns the order of the rows whose mapped keys are keys[i]
// (row i at keys[i].i on entry): a stable least-significant-digit radix
// sort, a byte a pass, skipping the bytes that all keys share. keys and
// tmp have the same length; the result is one of them.
func radixOrder(keys, tmp []radixItem) []radixItem {
	var counts [8][256]int
	for _, it := range keys {
		k := it.k
		for d := range 8 {
			counts[d][byte(k>>(8*d))]++
		}
	}
	n := len(keys)
	for d := range 8 {
		c := &counts[d]
		if c[byte(keys[0].k>>(8*d))] == n {
			continue // every key has the same byte here
		}
		sum := 0
		for b := range 256 {
			c[b], sum = sum, sum+c[b]
		}
		shift := uint(8 * d)
		for _, it := range keys {
			b := byte(it.k >> shift)
			tmp[c[b]] = it
			c[b]++
		}
		keys, tmp = tmp, keys
	}
	return keys
}

// radixPerm returns the order that sorts rows (at most 2^32) stably by
// key(&row.e): row j of the result is rows[perm[j].i]. Rows are held in
// input order, so stable is ties in input order. The rows do not move:
// only their keys and indexes, which the caller reads in order (a gather
// whose loads do not wait for each other, where permuting in place would
// chase one cache miss after another).
func radixPerm[E any](rows []ranked[E], key func(e *E) uint64) []radixItem {
	n := len(rows)
	keys := make([]radixItem, n)
	for i := range rows {
		keys[i] = radixItem{key(&rows[i].e), uint32(i)}
	}
	if n < 2 {
		return keys
	}
	return radixOrder(keys, make([]radixItem, n))
}
