package ray

import (
	"encoding/json"

	"fmt"
	"github.com/goray-dev/goray/backend"
)

// Codec encodes task and actor arguments and results to bytes and back, so
// they can cross a backend. It must be safe for concurrent use.
type Codec interface {
	// Name identifies the codec; drivers and workers must agree on it.
	Name() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default codec: encoding/json. Values that JSON cannot carry
// (channels, functions, cyclic structures) fail to encode, and unexported
// struct fields are dropped, on every backend alike.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) {
	if b, ok := fastMarshal(v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	if fastUnmarshal(data, v, false) {
		return nil
	}
	return json.Unmarshal(data, v)
}

// encode turns v into a backend value with codec c; a nil codec passes v
// through unencoded.
func encode[T any](c Codec, v T) (backend.Value, error) {
	if c == nil {
		return backend.Value{Native: v}, nil
	}
	if _, ok := c.(jsonCodec); ok {
		// A pointer in an interface that does not escape keeps v off the
		// heap, unlike boxing v itself for Marshal.
		if b, ok := fastMarshalPtr(&v); ok {
			return backend.Value{Data: b}, nil
		}
	}
	data, err := c.Marshal(v)
	if err != nil {
		return backend.Value{}, fmt.Errorf("encode %T with %s codec: %w", v, c.Name(), err)
	}
	return backend.Value{Data: data}, nil
}

// decode is the inverse of encode.
func decode[T any](c Codec, v backend.Value) (T, error) {
	var out T
	if c == nil || v.Native != nil {
		if v.Native == nil {
			return out, nil
		}
		t, ok := v.Native.(T)
		if ok {
			return t, nil
		}
		if c == nil || v.Data == nil {
			return out, fmt.Errorf("decode: have %T, want %T", v.Native, out)
		}
		// Data beside a Native of another type: the encoding is the value.
	}
	// A backend's Data is never modified once made (every Get of the
	// object reads the same bytes), so a string decoded from it may share
	// its bytes: it keeps only the encoded value alive.
	if _, ok := c.(jsonCodec); ok && fastUnmarshal(v.Data, &out, true) {
		return out, nil
	}
	return decodeSlow[T](c, v.Data)
}

// decodeSlow decodes with the codec itself. It is apart from decode so that
// the value it hands the codec, which escapes, is not decode's: the fast
// path then does not allocate.
func decodeSlow[T any](c Codec, data []byte) (T, error) {
	var out T
	if err := c.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("decode %T with %s codec: %w", out, c.Name(), err)
	}
	return out, nil
}
