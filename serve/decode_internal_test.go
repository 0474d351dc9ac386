package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
)

type flatIn struct {
	Text  string
	N     int      `json:"n,omitempty"`
	Tags  []string `json:",omitempty"`
	Meta  map[string]any
	Wait  time.Duration
	When  time.Time // decodes itself
	Skip  string    `json:"-"`
	Dash  string    `json:"-,"`
	Any   any
	inner int
}

type nestedIn struct {
	Text  string
	Inner struct{ A int }
}

type embeddedIn struct {
	flatIn
	B int
}

type twinsIn struct {
	A string `json:"x"`
	B string `json:"X"`
}

// strictDecode is the Decoder's answer, which decodeBody must give.
func strictDecode[I any](body []byte, strict bool) (I, error) {
	var in I
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(&in)
	if err == nil && len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
		err = json.Unmarshal([]byte("x"), new(int)) // any error
	}
	return in, err
}

// checkSame decodes body with decodeBody, strictly and not, and compares
// with the Decoder: the same value when both succeed, an error when the
// Decoder fails.
func checkSame[I any](t *testing.T, body string) {
	t.Helper()
	for _, strict := range []bool{true, false} {
		ctx := context.Background()
		if !strict {
			ctx = context.WithValue(ctx, lenientKey{}, true)
		}
		want, werr := strictDecode[I]([]byte(body), strict)
		got, gerr := decodeBody[I](ctx, []byte(body))
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%T %q strict=%v: Decoder's error %v, decodeBody's %v", want, body, strict, werr, gerr)
			continue
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%T %q strict=%v: decodeBody %+v, Decoder %+v", want, body, strict, got, want)
		}
	}
}

// decodeBody's json.Unmarshal path gives the strict Decoder's answer:
// unknown keys, case, escapes, nesting, tags, trailing data, bad JSON.
func TestDecodeBodyAsTheDecoder(t *testing.T) {
	bodies := []string{
		`{"Text":"hi"}`, `{"text":"hi"}`, `{"TEXT":"hi","n":3}`, `{"N":3}`, `{"txt":"x"}`,
		` { "Text" : "a,b}" , "Tags" : ["x","y]"] , "Meta" : {"k":{"deep":[1,2,{"z":null}]}} } `,
		`{"Wait":5,"When":"2026-12-06T15:00:00Z","Any":{"q":[true,false]}}`,
		`{"Skip":"s"}`, `{"-":"d"}`, `{"Dash":"d"}`, `{"inner":1}`, `{"\u0054ext":"esc"}`, `{"T\\"ext":"q"}`,
		`{"Text":"a\"}b"}`, `{"Text":"é"}`, `{"Tëxt":"x"}`, `{}`, `null`, `[]`, `"s"`, `{"Text":1}`,
		`{"Text":"x"} {"Text":"y"}`, `{"Text":"x"} `, `{"Text":"x"`, `{"Text":"x",}`, ``, `{"Text":"x","Text":"y"}`,
		`{"Inner":{"A":1}}`, `{"Inner":{"A":1,"B":2}}`, `{"inner":{"a":1}}`, `{"B":1}`, `{"x":"1"}`, `{"X":"1","x":"2"}`,
		`{"Tags":null,"Meta":null,"Any":null,"When":null}`, `{"n":1e3}`, `{"n":-0}`, `{"Text":"` + strings.Repeat("ab", 300) + `"}`,
	}
	for _, b := range bodies {
		checkSame[flatIn](t, b)
		checkSame[*flatIn](t, b)
		checkSame[nestedIn](t, b)
		checkSame[embeddedIn](t, b)
		checkSame[twinsIn](t, b)
		checkSame[map[string]int](t, b)
		checkSame[string](t, b)
	}
	is := is.New(t)
	is.True(namesOf(reflect.TypeFor[flatIn]()).check)     // the fast path applies
	is.True(!namesOf(reflect.TypeFor[nestedIn]()).fast)   // the Decoder's
	is.True(!namesOf(reflect.TypeFor[embeddedIn]()).fast) // promoted fields: the Decoder's
	is.True(!namesOf(reflect.TypeFor[twinsIn]()).fast)    // names alike but for case
}
