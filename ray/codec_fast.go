package ray

import (
	"strconv"
	"sync/atomic"
	"unsafe"
)

// emptyObject is the encoding of struct{}; shared, and never modified by
// backends or decoders.
var emptyObject = []byte("{}")

// Fast paths of the JSON codec for the small values most tasks pass
// (strings, ints, bools, empty structs). Each produces exactly what
// encoding/json produces, and anything else falls back to it; the codec
// test checks both agree.

// fastMarshalPtr is fastMarshal for a pointer to the value, which avoids
// boxing the value. It is encode's: the bytes go to a backend, which never
// modifies them, so equal values may share them (booleans, small
// integers, and a string equal to the last one encoded) instead of being
// encoded again.
func fastMarshalPtr(p any) ([]byte, bool) {
	switch x := p.(type) {
	case *string:
		return marshalSharedString(*x)
	case *int:
		return marshalInt(int64(*x)), true
	case *int64:
		return marshalInt(*x), true
	case *bool:
		if *x {
			return jsonTrue, true
		}
		return jsonFalse, true
	case *struct{}:
		return emptyObject, true
	}
	return nil, false
}

// Shared encodings, never modified (their capacity is their length, so
// an append copies).
var (
	jsonTrue  = []byte("true")[:4:4]
	jsonFalse = []byte("false")[:5:5]
	smallInts = func() [][]byte {
		out := make([][]byte, 256)
		for i := range out {
			b := strconv.AppendInt(nil, int64(i), 10)
			out[i] = b[:len(b):len(b)]
		}
		return out
	}()
)

func marshalInt(x int64) []byte {
	if x >= 0 && x < int64(len(smallInts)) {
		return smallInts[x]
	}
	return strconv.AppendInt(nil, x, 10)
}

// sharedString is a string encode made, with its encoding.
type sharedString struct {
	s string
	b []byte
}

// lastString is a recent string encode made (at most maxSharedString
// bytes): work that returns one constant string, such as "ok", shares its
// encoding. It is replaced on every sharedStringEvery-th miss, so that
// strings that differ every time cost a fraction of an allocation more,
// not one.
var (
	lastString   atomic.Pointer[sharedString]
	stringMisses atomic.Uint32
)

const (
	maxSharedString   = 64
	sharedStringEvery = 8
)

func marshalSharedString(x string) ([]byte, bool) {
	if len(x) > maxSharedString {
		return marshalString(x)
	}
	if c := lastString.Load(); c != nil && c.s == x {
		return c.b, true
	}
	b, ok := marshalString(x)
	if ok && stringMisses.Add(1)%sharedStringEvery == 1 {
		lastString.Store(&sharedString{s: x, b: b[:len(b):len(b)]})
	}
	return b, ok
}

func fastMarshal(v any) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		return marshalString(x)
	case int:
		return strconv.AppendInt(nil, int64(x), 10), true
	case int64:
		return strconv.AppendInt(nil, x, 10), true
	case bool:
		return strconv.AppendBool(nil, x), true
	case struct{}:
		return emptyObject, true
	}
	return nil, false
}

func marshalString(x string) ([]byte, bool) {
	if !plainString(x) {
		return nil, false
	}
	b := make([]byte, 0, len(x)+2)
	b = append(b, '"')
	b = append(b, x...)
	return append(b, '"'), true
}

// plainString reports whether encoding/json writes s as is between quotes:
// printable ASCII without quote, backslash or the HTML characters it
// escapes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// fastUnmarshal decodes the small values of fastMarshal into v. With
// shared, data is never modified, and a string may share its bytes.
func fastUnmarshal(data []byte, v any, shared bool) bool {
	switch p := v.(type) {
	case *string:
		n := len(data)
		if n < 2 || data[0] != '"' || data[n-1] != '"' {
			return false
		}
		for _, c := range data[1 : n-1] {
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return false
			}
		}
		if shared && n > 2 {
			*p = unsafe.String(&data[1], n-2)
		} else {
			*p = string(data[1 : n-1])
		}
		return true
	case *int:
		x, ok := jsonInt(data)
		if ok {
			*p = int(x)
		}
		return ok
	case *int64:
		x, ok := jsonInt(data)
		if ok {
			*p = x
		}
		return ok
	case *bool:
		switch string(data) {
		case "true":
			*p = true
			return true
		case "false":
			*p = false
			return true
		}
	case *struct{}:
		return string(data) == "{}"
	}
	return false
}

// jsonInt parses a JSON integer literal: optional minus, no plus, no
// leading zeros, no fraction or exponent.
func jsonInt(data []byte) (int64, bool) {
	s := data
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	x, err := strconv.ParseInt(string(data), 10, 64)
	return x, err == nil
}
