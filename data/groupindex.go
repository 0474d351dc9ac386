package data

import (
	"reflect"
	"unsafe"
)

// groupIndex maps GroupBy's keys to the index of their state. Integer
// keys go into an open-addressing table of their bits (linear probing,
// Fibonacci hashing, at most half full), a few times faster than a Go map
// for the one lookup every row costs; other keys (strings, and floats,
// whose NaNs are each their own key, as in a Go map) into a map.
type groupIndex[K comparable] struct {
	m     map[K]int
	size  uintptr // bytes of an integer key; 0 when m is used
	slots []groupSlot
	shift uint
	n     int
}

// groupSlot is a key's bits and its index + 1 (0: empty).
type groupSlot struct {
	k uint64
	i int
}

func newGroupIndex[K comparable]() *groupIndex[K] {
	t := reflect.TypeFor[K]()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x := &groupIndex[K]{size: t.Size()}
		x.grow(64)
		return x
	}
	return &groupIndex[K]{m: map[K]int{}}
}

func (x *groupIndex[K]) bits(k *K) uint64 {
	p := unsafe.Pointer(k)
	switch x.size {
	case 8:
		return *(*uint64)(p)
	case 4:
		return uint64(*(*uint32)(p))
	case 2:
		return uint64(*(*uint16)(p))
	default:
		return uint64(*(*uint8)(p))
	}
}

func (x *groupIndex[K]) home(u uint64) int { return int((u * 0x9E3779B97F4A7C15) >> x.shift) }

// get returns the index of k's state.
func (x *groupIndex[K]) get(k K) (int, bool) {
	if x.m != nil {
		i, ok := x.m[k]
		return i, ok
	}
	u := x.bits(&k)
	mask := len(x.slots) - 1
	for j := x.home(u); ; j = (j + 1) & mask {
		s := &x.slots[j]
		if s.i == 0 {
			return 0, false
		}
		if s.k == u {
			return s.i - 1, true
		}
	}
}

// put sets k's index; k is not in x.
func (x *groupIndex[K]) put(k K, i int) {
	if x.m != nil {
		x.m[k] = i
		return
	}
	if 2*(x.n+1) > len(x.slots) {
		x.grow(2 * len(x.slots))
	}
	x.insert(x.bits(&k), i+1)
	x.n++
}

func (x *groupIndex[K]) insert(u uint64, i1 int) {
	mask := len(x.slots) - 1
	j := x.home(u)
	for x.slots[j].i != 0 {
		j = (j + 1) & mask
	}
	x.slots[j] = groupSlot{u, i1}
}

// grow makes the table n slots (a power of two) and puts the keys back.
func (x *groupIndex[K]) grow(n int) {
	old := x.slots
	x.slots = make([]groupSlot, n)
	x.shift = uint(64 - bitsLen(n))
	for _, s := range old {
		if s.i != 0 {
			x.insert(s.k, s.i)
		}
	}
}

// bitsLen is log2 of n, a power of two.
func bitsLen(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}
