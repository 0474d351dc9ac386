package serve

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// A request body is decoded strictly: a key that names no field of the
// input type is an error, as json.Decoder's DisallowUnknownFields makes
// it. A Decoder copies the body into a buffer of its own first, so for
// the usual input, a struct whose fields hold no structs of their own,
// decodeBody uses json.Unmarshal on the body as it is and then checks the
// object's keys against the type's field names itself (fastDecode). Any
// doubt (an escaped or non-ASCII key, a key that names no field, an
// error) sends it to the Decoder, whose answer (and error message) is
// the one given.

// fieldNames is what fastDecode knows of a type.
type fieldNames struct {
	// fast: json.Unmarshal plus the key check decides as a strict
	// Decoder does.
	fast bool
	// check: the type is a struct whose top-level keys are checked
	// against names (ASCII, no two alike but for case).
	check bool
	names []string
}

var fieldNamesOf sync.Map // reflect.Type → *fieldNames

func namesOf(t reflect.Type) *fieldNames {
	if f, ok := fieldNamesOf.Load(t); ok {
		return f.(*fieldNames)
	}
	f := newFieldNames(t)
	fieldNamesOf.Store(t, f)
	return f
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

func newFieldNames(t reflect.Type) *fieldNames {
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return &fieldNames{fast: noFields(t)}
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return &fieldNames{}
	}
	f := &fieldNames{fast: true, check: true}
	for sf := range t.Fields() {
		if sf.Anonymous {
			return &fieldNames{} // promoted fields: the Decoder's rules
		}
		if !sf.IsExported() {
			continue
		}
		name := sf.Name
		if tag, ok := sf.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" && !strings.HasPrefix(tag, "-,") {
				continue
			}
			if n != "" {
				name = n
			}
		}
		if !noFields(sf.Type) || !ascii(name) {
			return &fieldNames{}
		}
		for _, other := range f.names {
			if strings.EqualFold(other, name) {
				return &fieldNames{}
			}
		}
		f.names = append(f.names, name)
	}
	return f
}

// noFields reports whether a value of t, as JSON, has no object keys a
// strict Decoder would check: no struct within it (but one that decodes
// itself).
func noFields(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Implements(jsonUnmarshaler) {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return noFields(t.Elem())
	case reflect.Struct:
		return false
	}
	return true
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// fastDecode decodes body into v (a pointer to a value of the type f
// describes) with json.Unmarshal and reports whether that is the strict
// Decoder's answer too: false when the body is not valid JSON or has a
// key fastDecode cannot vouch for, and the caller must decode it again
// with the Decoder.
func (f *fieldNames) fastDecode(body []byte, v any, strict bool) bool {
	if !f.fast {
		return false
	}
	if json.Unmarshal(body, v) != nil {
		return false
	}
	return !strict || !f.check || knownKeys(body, f.names)
}

// knownKeys reports whether every key of the JSON object data (valid
// JSON, as json.Unmarshal found it) plainly names one of names, as
// encoding/json matches them (case-insensitively); false for anything
// else, an escaped or non-ASCII key included.
func knownKeys(data []byte, names []string) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return i < len(data) && data[i] == 'n' // null decodes nothing
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true
	}
	for i < len(data) && data[i] == '"' {
		j := i + 1
		for j < len(data) && data[j] != '"' {
			if data[j] == '\\' || data[j] >= 0x80 {
				return false
			}
			j++
		}
		if j >= len(data) || !known(data[i+1:j], names) {
			return false
		}
		i = skipSpace(data, j+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		if i = skipValue(data, skipSpace(data, i+1)); i < 0 {
			return false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(data, i+1)
		default:
			return false
		}
	}
	return false
}

func known(key []byte, names []string) bool {
	for _, n := range names {
		if len(n) == len(key) && bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index after the JSON value at data[i:] (valid
// JSON), or -1.
func skipValue(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch c := data[i]; c {
		case '"':
			i++
			for i < len(data) && data[i] != '"' {
				if data[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(data) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i
			}
			i++
		case ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && i > 0 && (data[i-1] == '"' || data[i-1] == '}' || data[i-1] == ']') {
			return i
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}
