package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

func sampleMessages() []message {
	info := &backend.RuntimeInfo{
		Task: "t.x", Attempt: 2, Node: "node-1", NodeLabels: map[string]string{"zone": "b"},
		Resources: backend.Resources{backend.CPU: 1.5, "TPU": 4}, Placement: backend.Placement{Group: 7, Bundle: 3},
		Env: map[string]string{"TPU_WORKER_ID": "3"}, Actor: 9,
	}
	return []message{
		{typ: msgRunTask, id: 1, name: "t.x", info: info, value: backend.Value{Data: []byte(`"hi"`)}},
		{typ: msgRunTask, id: 2, name: "t.nil", value: backend.Value{}},
		{typ: msgRunTask, id: 3, name: "t.empty", info: &backend.RuntimeInfo{Placement: backend.Placement{Bundle: -1}}, value: backend.Value{Data: []byte{}}},
		{typ: msgNewActor, id: 4, actor: 5, name: "c", info: info, value: backend.Value{Data: []byte("0")}},
		{typ: msgCall, id: 6, actor: 5, name: "add", value: backend.Value{Data: []byte("1")}},
		{typ: msgCancel, id: 6},
		{typ: msgKill, id: 7},
		{typ: msgOutput, id: 2, name: "task t", node: "node-1", value: backend.Value{Data: []byte("a line")}},
		{typ: msgDropActor, actor: 5},
		{typ: msgHeartbeat},
		{typ: msgGoodbye, err: backend.Errorf(backend.ResourceExhausted, "", "too big")},
		{typ: msgResult, id: 1, value: backend.Value{Data: []byte(`"ok"`)}},
		{typ: msgError, id: 2, err: &backend.Error{Code: backend.TaskFailed, Err: &backend.TaskError{Task: "t.x", Attempt: 1, Message: "boom", Panicked: true, Stack: "goroutine 1"}}},
		{typ: msgError, id: 3, err: backend.Errorf(backend.NotFound, "run task t.y", "task %q is not registered", "t.y")},
		{typ: msgError, id: 8, err: &backend.Error{Code: backend.TaskFailed, Err: &backend.TaskError{Task: "c.m", Message: "no such model", Status: 404}}},
		{typ: msgError, id: 4, err: context.Canceled},
		{typ: msgError, id: 5, err: context.DeadlineExceeded},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages() {
		t.Run(m.typ.String(), func(t *testing.T) {
			is := is.New(t)
			frame, err := appendFrame(nil, &m)
			is.NoErr(err)
			is.Equal(int(binary.BigEndian.Uint32(frame)), len(frame)-frameHeader)
			got, err := decodeMessage(frame[frameHeader:])
			is.NoErr(err)
			is.Equal(got.typ, m.typ)
			is.Equal(got.id, m.id)
			is.Equal(got.actor, m.actor)
			is.Equal(got.name, m.name)
			is.True(reflect.DeepEqual(got.info, m.info))
			is.True(bytes.Equal(got.value.Data, m.value.Data))
			is.Equal(got.value.Data == nil, m.value.Data == nil) // nil and empty survive
			if m.err != nil {
				is.Equal(got.err.Error(), m.err.Error())
				is.Equal(backend.CodeOf(got.err), backend.CodeOf(m.err))
				if m.err == context.Canceled || m.err == context.DeadlineExceeded {
					is.Equal(got.err, m.err) // context errors come back as themselves
				}
				var want, have *backend.TaskError
				if errors.As(m.err, &want) {
					is.True(errors.As(got.err, &have))
					is.Equal(*have, *want)
				}
			}
		})
	}
}

// A task error's HTTP status is a field of the frame: a frame written
// before the status existed (no status, flag 1) still decodes, a task
// error without a status is written as it was then, and one with a status
// comes back with it, whatever its message says.
func TestTaskErrorStatusOnTheWire(t *testing.T) {
	is := is.New(t)
	old := func(te *backend.TaskError) []byte { // the encoding without the status
		b := []byte{byte(msgError)}
		b = binary.AppendUvarint(b, 9)
		b = binary.AppendUvarint(b, uint64(backend.TaskFailed))
		b = append(b, ctxNone)
		b = appendString(b, "call actor")
		b = appendString(b, te.Error())
		b = append(b, 1)
		b = appendString(b, te.Task)
		b = binary.AppendVarint(b, int64(te.Attempt))
		b = appendString(b, te.Message)
		b = appendBool(b, te.Panicked)
		return appendString(b, te.Stack)
	}
	te := &backend.TaskError{Task: "c.m", Attempt: 2, Message: "no model [HTTP 404]"}
	m, err := decodeMessage(old(te))
	is.NoErr(err)
	var got *backend.TaskError
	is.True(errors.As(m.err, &got))
	is.Equal(*got, *te) // Status 0: the text is no status
	is.Equal(backend.CodeOf(m.err), backend.TaskFailed)

	frame, err := appendFrame(nil, &message{typ: msgError, id: 9, err: &backend.Error{Code: backend.TaskFailed, Op: "call actor", Err: te}})
	is.NoErr(err)
	is.True(bytes.Equal(frame[frameHeader:], old(te))) // what an older peer reads

	te.Status = 429
	frame, err = appendFrame(nil, &message{typ: msgError, id: 9, err: &backend.Error{Code: backend.TaskFailed, Err: te}})
	is.NoErr(err)
	m, err = decodeMessage(frame[frameHeader:])
	is.NoErr(err)
	is.True(errors.As(m.err, &got))
	is.Equal(got.Status, 429)

	bad := bytes.Clone(frame[frameHeader:])
	bad[len(bad)-2] = 0 // status 0 after the status flag: not a status
	bad = bad[:len(bad)-1]
	_, err = decodeMessage(bad)
	is.True(errors.Is(err, errGarbled))
}

func TestNativeValueRefused(t *testing.T) {
	is := is.New(t)
	_, err := appendFrame([]byte("keep"), &message{typ: msgRunTask, value: backend.Value{Native: 1}})
	is.True(errors.Is(err, errNativeValue))

	// Native beside Data is the value Data encodes: Data crosses.
	frame, err := appendFrame(nil, &message{typ: msgResult, id: 1, value: backend.Value{Data: []byte(`{"a":1}`), Native: map[string]int{"a": 1}}})
	is.NoErr(err)
	m, err := decodeMessage(frame[frameHeader:])
	is.NoErr(err)
	is.Equal(string(m.value.Data), `{"a":1}`)
	is.Equal(m.value.Native, nil)
}

func TestDecodeGarbled(t *testing.T) {
	good, err := appendFrame(nil, &sampleMessages()[0])
	if err != nil {
		t.Fatal(err)
	}
	body := good[frameHeader:]
	for name, b := range map[string][]byte{
		"empty":        {},
		"unknown type": {200, 1},
		"truncated":    body[:len(body)-3],
		"trailing":     append(append([]byte{}, body...), 0),
		"huge length":  {byte(msgRunTask), 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge count":   {byte(msgRunTask), 1, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
		"bad bool":     {byte(msgError), 1, 0, 0, 0, 0, 7},
		"bad code":     {byte(msgError), 1, 99, 0, 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			is := is.New(t)
			_, err := decodeMessage(b)
			is.True(errors.Is(err, errGarbled))
			is.True(strings.Contains(err.Error(), "garbled message"))
		})
	}
}

func TestFrameReaderLimit(t *testing.T) {
	is := is.New(t)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 70<<20)
	fr := frameReader{r: bytes.NewReader(hdr[:]), limit: 64 << 20}
	_, err := fr.next()
	var tl *tooLargeError
	is.True(errors.As(err, &tl))
	is.Equal(err.Error(), "message of 70.0 MiB exceeds the limit of 64.0 MiB (MaxMessageSize)")
}

// FuzzDecodeMessage checks that the decoder never panics nor allocates
// without bound on any input, and that whatever it accepts re-encodes to
// a message that decodes the same.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		frame, err := appendFrame(nil, &m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[frameHeader:])
	}
	f.Add([]byte{})
	f.Add([]byte{byte(msgRunTask), 0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeMessage(body)
		if err != nil {
			if !errors.Is(err, errGarbled) {
				t.Fatalf("error %v does not match errGarbled", err)
			}
			return
		}
		frame, err := appendFrame(nil, &m)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", m, err)
		}
		m2, err := decodeMessage(frame[frameHeader:])
		if err != nil {
			t.Fatalf("decode of re-encoded message: %v", err)
		}
		if m2.typ != m.typ || m2.id != m.id || m2.actor != m.actor || m2.name != m.name ||
			!bytes.Equal(m2.value.Data, m.value.Data) || !reflect.DeepEqual(m2.info, m.info) {
			t.Fatalf("round trip changed the message: %+v != %+v", m2, m)
		}
		if (m.err == nil) != (m2.err == nil) || m.err != nil && m.err.Error() != m2.err.Error() {
			t.Fatalf("round trip changed the error: %v != %v", m2.err, m.err)
		}
	})
}

func TestManifestDiff(t *testing.T) {
	is := is.New(t)
	driver := Manifest{Codec: "json", Entries: []Entry{
		{Kind: KindTask, Name: "a", Signature: "func(int) int"},
		{Kind: KindTask, Name: "b", Signature: "func(string) string"},
		{Kind: KindActor, Name: "c", Signature: "func(int) *main.c"},
	}}
	is.Equal(Diff(driver, driver), "")
	worker := Manifest{Codec: "json", Entries: []Entry{
		{Kind: KindTask, Name: "a", Signature: "func(int) string"},
		{Kind: KindActor, Name: "c", Signature: "func(int) *main.c"},
		{Kind: KindMethod, Name: "c.inc", Signature: "func(*main.c, int) int"},
	}}
	is.True(driver.Fingerprint() != worker.Fingerprint())
	d := Diff(driver, worker)
	is.True(strings.Contains(d, `task "a" is func(int) int in the driver but func(int) string in the worker`))
	is.True(strings.Contains(d, `task "b" is registered only in the driver`))
	is.True(strings.Contains(d, `method "c.inc" is registered only in the worker`))
	worker.Codec = "gob"
	is.True(strings.Contains(Diff(driver, worker), `codec "json", the worker with "gob"`))
	// The fingerprint does not depend on order.
	rev := Manifest{Codec: "json", Entries: []Entry{driver.Entries[2], driver.Entries[1], driver.Entries[0]}}
	is.Equal(rev.Fingerprint(), driver.Fingerprint())
}

type fpPoint struct {
	X    int `json:"x"`
	Y    int
	Next *fpPoint
	priv int
}

func TestTypeString(t *testing.T) {
	is := is.New(t)
	s := TypeString(reflect.TypeFor[[]*fpPoint]())
	is.Equal(s, `[]*github.com/goray-dev/goray/worker.fpPoint{X int "json:\"x\""; Y int; Next *github.com/goray-dev/goray/worker.fpPoint}`)
	is.Equal(TypeString(reflect.TypeFor[map[string]struct{ A bool }]()), "map[string]struct{A bool}")
	is.Equal(TypeString(reflect.TypeFor[int]()), "int")
}

// TestInfoCache decodes a sequence of messages whose infos repeat, differ
// in one field or are absent, with a connection's cache and without: the
// results are the same, and a cached info is a copy of its own.
func TestInfoCache(t *testing.T) {
	is := is.New(t)
	base := backend.RuntimeInfo{
		Task: "t.x", Node: "node-1", NodeLabels: map[string]string{"zone": "b", "pool": "p", "a": "1"},
		Resources: backend.Resources{backend.CPU: 1, "TPU": 4, "memory": 8}, Placement: backend.Placement{Bundle: -1},
		Env: map[string]string{"A": "1", "B": "2", "C": "3"},
	}
	vary := []func(i *backend.RuntimeInfo){
		func(i *backend.RuntimeInfo) {},
		func(i *backend.RuntimeInfo) { i.Attempt = 1 },
		func(i *backend.RuntimeInfo) { i.Task = "t.y" },
		func(i *backend.RuntimeInfo) { i.Env = map[string]string{"A": "1", "B": "2", "C": "4"} },
		func(i *backend.RuntimeInfo) { i.Resources = backend.Resources{backend.CPU: 2, "TPU": 4, "memory": 8} },
		func(i *backend.RuntimeInfo) { i.Actor = 3 },
	}
	var cache infoCache
	var prev *backend.RuntimeInfo
	for range 3 {
		for k, f := range vary {
			for _, withInfo := range []bool{true, true, false} {
				info := base
				f(&info)
				m := message{typ: msgRunTask, id: uint64(k), name: "t", value: backend.Value{Data: []byte("1")}}
				if withInfo {
					m.info = &info
				}
				frame, err := appendFrame(nil, &m)
				is.NoErr(err)
				want, err := decodeMessage(frame[frameHeader:])
				is.NoErr(err)
				got, err := decodeCached(frame[frameHeader:], &cache)
				is.NoErr(err)
				is.True(reflect.DeepEqual(got, want)) // round, variant
				is.True(reflect.DeepEqual(got.info, m.info))
				if got.info != nil {
					is.True(got.info != prev) // each message has its own info
					prev = got.info
				}
			}
		}
	}
}

// TestSharedInfo: a connection's reader decodes equal infos in a row to
// one shared info, which a later different info does not change (it gets a
// new one); an info too large to cache is decoded into the message, not
// shared; decoding with the cache allocates nothing for a repeated info.
func TestSharedInfo(t *testing.T) {
	is := is.New(t)
	var cache infoCache
	decode := func(info *backend.RuntimeInfo) message {
		frame, err := appendFrame(nil, &message{typ: msgRunTask, id: 1, name: "t", info: info})
		is.NoErr(err)
		var m message
		is.NoErr(decodeInto(&m, frame[frameHeader:], &cache))
		return m
	}
	a := backend.RuntimeInfo{Task: "t", Node: "n1", NodeLabels: map[string]string{"zone": "b"}, Placement: backend.Placement{Bundle: -1}}
	m1 := decode(&a)
	is.True(m1.infoShared)
	first := m1.info
	is.True(reflect.DeepEqual(*first, a))
	m2 := decode(&a)
	is.True(m2.infoShared)
	is.True(m2.info == first) // the same shared info
	b := a
	b.Attempt = 1
	m3 := decode(&b)
	is.True(m3.infoShared)
	is.True(m3.info != first)
	is.Equal(m3.info.Attempt, 1)
	is.Equal(first.Attempt, 0) // the earlier shared info is unchanged
	is.True(reflect.DeepEqual(*first, a))
	big := a
	big.Env = map[string]string{"BIG": strings.Repeat("x", maxCachedInfo)}
	frame, err := appendFrame(nil, &message{typ: msgRunTask, id: 1, name: "t", info: &big})
	is.NoErr(err)
	var m4 message
	is.NoErr(decodeInto(&m4, frame[frameHeader:], &cache))
	is.True(!m4.infoShared) // too large to cache: the message's own
	is.True(m4.info == &m4.infoBuf)
	is.Equal(m4.info.Env["BIG"], big.Env["BIG"])
	var none message
	frame, err = appendFrame(nil, &message{typ: msgRunTask, id: 1, name: "t"})
	is.NoErr(err)
	is.NoErr(decodeInto(&none, frame[frameHeader:], &cache))
	is.True(none.info == nil && !none.infoShared)

	frame, err = appendFrame(nil, &message{typ: msgRunTask, id: 2, name: "t", info: &b})
	is.NoErr(err)
	var m message
	is.NoErr(decodeInto(&m, frame[frameHeader:], &cache))
	allocs := testing.AllocsPerRun(100, func() {
		if err := decodeInto(&m, frame[frameHeader:], &cache); err != nil || !m.infoShared {
			panic("not shared")
		}
	})
	is.Equal(allocs, 0.0)
}

// TestRepeatedNamesShared: a connection's reader decodes requests for the
// task or method it decoded last into the same name string, without
// allocating it again, and other names as themselves.
func TestRepeatedNamesShared(t *testing.T) {
	is := is.New(t)
	var cache infoCache
	var prev string
	for i, name := range []string{"t.a", "t.a", "t.b", "t.a", "t.a", "m"} {
		typ := msgRunTask
		if name == "m" {
			typ = msgCall
		}
		frame, err := appendFrame(nil, &message{typ: typ, id: uint64(i + 1), actor: 1, name: name, value: backend.Value{Data: []byte("1")}})
		is.NoErr(err)
		var m message
		is.NoErr(decodeInto(&m, frame[frameHeader:], &cache))
		is.Equal(m.name, name)
		if name == prev {
			is.Equal(unsafe.StringData(m.name), unsafe.StringData(prev)) // shared
		}
		prev = m.name
	}
	frame, err := appendFrame(nil, &message{typ: msgRunTask, id: 9, name: "t.a"})
	is.NoErr(err)
	var m message
	allocs := testing.AllocsPerRun(100, func() {
		if err := decodeInto(&m, frame[frameHeader:], &cache); err != nil {
			panic(err)
		}
	})
	is.Equal(allocs, 0.0) // a repeated name, no value: nothing to allocate
}

// TestMapsEncodeInKeyOrder: equal maps encode to equal bytes whatever
// their iteration order, which the info cache relies on.
func TestMapsEncodeInKeyOrder(t *testing.T) {
	is := is.New(t)
	m := map[string]string{}
	res := backend.Resources{}
	for i := range 20 {
		m[strings.Repeat("k", i+1)] = "v"
		res[strings.Repeat("r", i+1)] = float64(i)
	}
	info := &backend.RuntimeInfo{NodeLabels: m, Env: m, Resources: res}
	first := appendInfo(nil, info)
	for range 20 {
		is.True(bytes.Equal(appendInfo(nil, info), first))
	}
}

// TestInfoEncCache: a connection's cache of the last info it encoded gives
// exactly appendInfo's bytes, whether it hits (the same strings and the
// very same maps) or not (another map, another field), and a nil cache
// encodes.
func TestInfoEncCache(t *testing.T) {
	is := is.New(t)
	labels := map[string]string{"zone": "a", "pool": "p"}
	env := map[string]string{"TPU_WORKER_ID": "0"}
	res := backend.Resources{backend.CPU: 1}
	base := backend.RuntimeInfo{Task: "t", Node: "n", NodeLabels: labels, Env: env, Resources: res, Placement: backend.Placement{Bundle: -1}}
	var enc infoEnc
	infos := []backend.RuntimeInfo{base, base} // the second hits
	other := base
	other.NodeLabels = map[string]string{"zone": "b", "pool": "p"} // another map
	infos = append(infos, other, base)
	attempt := base
	attempt.Attempt = 1
	infos = append(infos, attempt)
	bundle := base
	bundle.Placement = backend.Placement{Group: 3, Bundle: 0}
	infos = append(infos, bundle, base)
	for i := range infos {
		got := enc.append([]byte("x"), &infos[i])
		want := appendInfo([]byte("x"), &infos[i])
		is.True(bytes.Equal(got, want)) // info i
	}
	is.True(enc.ok && sameMap(enc.labels, labels))
	var none *infoEnc
	is.True(bytes.Equal(none.append(nil, &base), appendInfo(nil, &base)))
	is.True(bytes.Equal(enc.append(nil, nil), appendInfo(nil, nil)))
}
