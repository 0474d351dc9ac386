package ray

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestJSONFastPathsMatchEncodingJSON checks that the codec's fast paths
// produce and accept exactly what encoding/json does.
func TestJSONFastPathsMatchEncodingJSON(t *testing.T) {
	values := []any{"", "ok", "hello world", "a\"b", "back\\slash", "<html>", "tab\t", "é", "\x7f",
		0, 1, -1, 42, math.MaxInt64, math.MinInt64, int64(-7), true, false, struct{}{}}
	for _, v := range values {
		t.Run("marshal", func(t *testing.T) {
			is := is.New(t)
			want, err := json.Marshal(v)
			is.NoErr(err)
			got, err := JSON.Marshal(v)
			is.NoErr(err)
			is.Equal(string(got), string(want))
		})
	}
	inputs := []string{`""`, `"ok"`, `"a\"b"`, `"\u0041"`, `"é"`, `0`, `-0`, `01`, `+1`, `1.5`, `1e3`, `-12`,
		`9223372036854775807`, `9223372036854775808`, `true`, `false`, `null`, `{}`, `{"a":1}`, `"unterminated`, ``, ` 1`}
	for _, in := range inputs {
		t.Run("unmarshal "+in, func(t *testing.T) {
			is := is.New(t)
			check := func(fresh func() any) {
				a, b := fresh(), fresh()
				errA := json.Unmarshal([]byte(in), a)
				errB := JSON.Unmarshal([]byte(in), b)
				is.Equal(errA == nil, errB == nil) // both accept or both reject
				if errA == nil {
					is.Equal(a, b)
				}
			}
			check(func() any { return new(string) })
			check(func() any { return new(int) })
			check(func() any { return new(int64) })
			check(func() any { return new(bool) })
			check(func() any { return new(struct{}) })
		})
	}
}

func FuzzJSONFastPaths(f *testing.F) {
	for _, s := range []string{`"ok"`, `12`, `-0`, `true`, `{}`, `"\u00e9"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s1, s2 string
		if (json.Unmarshal(data, &s1) == nil) != (JSON.Unmarshal(data, &s2) == nil) || s1 != s2 {
			t.Fatalf("string %q: json %q, fast %q", data, s1, s2)
		}
		var i1, i2 int
		if (json.Unmarshal(data, &i1) == nil) != (JSON.Unmarshal(data, &i2) == nil) || i1 != i2 {
			t.Fatalf("int %q: json %d, fast %d", data, i1, i2)
		}
		m1, _ := json.Marshal(string(data))
		m2, _ := JSON.Marshal(string(data))
		if string(m1) != string(m2) {
			t.Fatalf("marshal %q: json %s, fast %s", data, m1, m2)
		}
	})
}

// TestEncodeFastPathMatchesEncodingJSON checks the typed (unboxed) fast
// path of encode and decode against encoding/json.
func TestEncodeFastPathMatchesEncodingJSON(t *testing.T) {
	is := is.New(t)
	for _, s := range []string{"", "ok", "<b>", "é", "a\"b"} {
		v, err := encode(JSON, s)
		is.NoErr(err)
		want, _ := json.Marshal(s)
		is.Equal(string(v.Data), string(want))
		back, err := decode[string](JSON, v)
		is.NoErr(err)
		is.Equal(back, s)
	}
	for _, n := range []int{0, -5, math.MaxInt64} {
		v, err := encode(JSON, n)
		is.NoErr(err)
		want, _ := json.Marshal(n)
		is.Equal(string(v.Data), string(want))
		back, err := decode[int](JSON, v)
		is.NoErr(err)
		is.Equal(back, n)
	}
	v, err := encode(JSON, struct{}{})
	is.NoErr(err)
	is.Equal(string(v.Data), "{}")
	b, err := encode(JSON, true)
	is.NoErr(err)
	is.Equal(string(b.Data), "true")
}

// TestDecodeSharesStringBytes: a string result decoded from a backend
// value (whose bytes are never modified) shares them instead of copying,
// while the JSON codec's own Unmarshal, whose caller owns the bytes,
// copies.
func TestDecodeSharesStringBytes(t *testing.T) {
	is := is.New(t)
	data := []byte(`"shared"`)
	s, err := decode[string](JSON, backend.Value{Data: data})
	is.NoErr(err)
	is.Equal(s, "shared")
	is.True(unsafe.StringData(s) == &data[1]) // no copy
	var own string
	is.NoErr(JSON.Unmarshal(data, &own))
	is.Equal(own, "shared")
	is.True(unsafe.StringData(own) != &data[1]) // a copy
	data[1] = 'S'
	is.Equal(own, "shared")
	empty, err := decode[string](JSON, backend.Value{Data: []byte(`""`)})
	is.NoErr(err)
	is.Equal(empty, "")
}

// TestEncodeSharesEqualValues: encode gives equal values (booleans, small
// integers, a string equal to a recent one) shared bytes, which stay
// exactly encoding/json's and cannot be grown in place; strings that
// differ each time are encoded each time, correctly.
func TestEncodeSharesEqualValues(t *testing.T) {
	is := is.New(t)
	enc := func(v any) []byte {
		var out backend.Value
		var err error
		switch x := v.(type) {
		case string:
			out, err = encode(JSON, x)
		case int:
			out, err = encode(JSON, x)
		case bool:
			out, err = encode(JSON, x)
		}
		is.NoErr(err)
		want, _ := json.Marshal(v)
		is.Equal(string(out.Data), string(want))
		return out.Data
	}
	var first []byte
	shared := false
	for range 2 * sharedStringEvery {
		b := enc("ok")
		if first != nil && &b[0] == &first[0] {
			shared = true
		}
		first = b
	}
	is.True(shared)                  // a constant string shares its encoding
	is.Equal(len(first), cap(first)) // shared: an append copies
	for i := range 50 {
		s := fmt.Sprint("v", i) // differ every time
		is.Equal(string(enc(s)), `"`+s+`"`)
		is.Equal(string(enc("ok")), `"ok"`)
	}
	is.True(&enc(7)[0] == &enc(7)[0])
	is.Equal(cap(enc(7)), 1)
	is.True(&enc(300)[0] != &enc(300)[0]) // not small: encoded each time
	is.Equal(string(enc(-1)), "-1")
	is.True(&enc(true)[0] == &enc(true)[0])
	is.Equal(cap(enc(true)), 4)
	is.Equal(string(enc(false)), "false")
	long := strings.Repeat("x", maxSharedString+1)
	is.True(&enc(long)[0] != &enc(long)[0])
}
