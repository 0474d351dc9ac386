package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"unsafe"

	"github.com/goray-dev/goray/backend"
)

// Protocol constants.
const (
	// ProtocolVersion is the version of the frame protocol. A driver and
	// a worker of different versions refuse each other in the handshake
	// with FailedPrecondition.
	ProtocolVersion = 1
	// DefaultMaxMessageSize bounds one message (a frame) when the options
	// leave it 0: 64 MiB.
	DefaultMaxMessageSize = 64 << 20
	// MinMaxMessageSize is the smallest accepted message bound.
	MinMaxMessageSize = 4 << 10

	protocolName = "goray-worker/1"
	connectPath  = "/goray/worker/connect"
	frameHeader  = 4
	// maxHelloSize bounds the handshake's request body (the driver's
	// manifest).
	maxHelloSize = 16 << 20
)

// msgType is the first byte of every frame body.
type msgType byte

const (
	// driver to worker
	msgRunTask msgType = 1 + iota
	msgNewActor
	msgCall
	msgCancel
	msgDropActor
	// both ways
	msgHeartbeat
	msgGoodbye
	// worker to driver
	msgResult
	msgError
	// driver to worker: cancel a running task by ending the worker process
	msgKill
	// worker to driver: a line the worker's code wrote to stdout or stderr
	msgOutput
	msgLast = msgOutput
)

var msgNames = [...]string{
	msgRunTask: "run-task", msgNewActor: "new-actor", msgCall: "call", msgCancel: "cancel",
	msgDropActor: "drop-actor", msgHeartbeat: "heartbeat", msgGoodbye: "goodbye",
	msgResult: "result", msgError: "error", msgKill: "kill", msgOutput: "output",
}

func (t msgType) String() string {
	if t >= 1 && t <= msgLast {
		return msgNames[t]
	}
	return fmt.Sprintf("msgType(%d)", byte(t))
}

// message is one decoded frame. Which fields are set depends on typ:
//
//	run-task   id name info value          (name: task)
//	new-actor  id actor name info value    (name: class)
//	call       id actor name info value    (name: method)
//	cancel     id
//	drop-actor actor
//	heartbeat
//	goodbye    err                         (the sender closes the connection)
//	result     id value
//	error      id err
//	kill       id
//	output     id name node value          (id: 1 stdout, 2 stderr; name: source)
type message struct {
	typ   msgType
	id    uint64
	actor uint64
	name  string
	info  *backend.RuntimeInfo
	value backend.Value
	err   error
	node  string // output: the node of the work that wrote it
	// infoShared tells that info points to a connection's shared decoded
	// info (infoCache.shared), which nothing modifies: a holder may keep
	// the pointer instead of a copy.
	infoShared bool
	// infoBuf holds the decoded runtime info that info points to when it
	// is not shared (decodeInto), sparing an allocation per frame.
	infoBuf backend.RuntimeInfo
}

// errGarbled is the cause of every decoding error.
var errGarbled = errors.New("garbled message")

func garbled(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errGarbled}, args...)...)
}

// appendFrame appends m as a frame (length header and body) to b.
func appendFrame(b []byte, m *message) ([]byte, error) {
	return appendFrameCached(b, m, nil)
}

// appendFrameCached is appendFrame with a connection's cache of the last
// runtime info it encoded (nil for none).
func appendFrameCached(b []byte, m *message, enc *infoEnc) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(m.typ))
	var err error
	switch m.typ {
	case msgRunTask, msgNewActor, msgCall:
		b = binary.AppendUvarint(b, m.id)
		if m.typ != msgRunTask {
			b = binary.AppendUvarint(b, m.actor)
		}
		b = appendString(b, m.name)
		b = enc.append(b, m.info)
		b, err = appendValue(b, m.value)
	case msgCancel, msgKill:
		b = binary.AppendUvarint(b, m.id)
	case msgOutput:
		b = binary.AppendUvarint(b, m.id)
		b = appendString(b, m.name)
		b = appendString(b, m.node)
		b, err = appendValue(b, m.value)
	case msgDropActor:
		b = binary.AppendUvarint(b, m.actor)
	case msgHeartbeat:
	case msgGoodbye:
		b = appendError(b, m.err)
	case msgResult:
		b = binary.AppendUvarint(b, m.id)
		b, err = appendValue(b, m.value)
	case msgError:
		b = binary.AppendUvarint(b, m.id)
		b = appendError(b, m.err)
	default:
		err = fmt.Errorf("cannot encode message type %v", m.typ)
	}
	if err != nil {
		return b[:start], err
	}
	n := len(b) - start - frameHeader
	if uint64(n) > math.MaxUint32 {
		return b[:start], fmt.Errorf("message of %d bytes is too large for a frame", n)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// decodeMessage decodes a frame body (without its length header). It
// never panics, and copies everything it keeps out of body.
func decodeMessage(body []byte) (message, error) { return decodeCached(body, nil) }

// infoCache keeps the last runtime info a connection decoded, with its
// encoding: the tasks a driver sends mostly carry equal infos, and one
// that starts with the same bytes decodes to the same info (the encoding
// is self-delimiting), so it is copied instead of decoded again. The
// copies share the maps, which running code only reads (as in process,
// where the tasks of a node share its labels). The cached info itself is
// shared too (shared): the decoded info of every message whose encoding
// matches is that pointer, which the worker's task contexts keep instead
// of a copy each. It is never modified: a new encoding gets a new one.
type infoCache struct {
	raw    []byte
	shared *backend.RuntimeInfo
	// name is the name of the last request decoded: requests for the
	// same task or method in a row share it instead of allocating it
	// each time.
	name string
}

// maxCachedInfo bounds the encoding infoCache keeps.
const maxCachedInfo = 4 << 10

// decodeCached is decodeMessage with a connection's info cache (nil for
// none).
func decodeCached(body []byte, cache *infoCache) (message, error) {
	var m message
	if err := decodeInto(&m, body, cache); err != nil {
		return message{}, err
	}
	if m.info != nil {
		info := *m.info
		m.info = &info
	}
	m.infoShared, m.infoBuf = false, backend.RuntimeInfo{} // its own info, whatever the cache did
	return m, nil
}

// decodeInto is decodeCached into m, whose info, if any, points into m
// itself (m.infoBuf): the caller copies what it keeps of m.
func decodeInto(m *message, body []byte, cache *infoCache) error {
	d := decoder{b: body, cache: cache}
	*m = message{}
	if len(body) == 0 {
		return garbled("empty frame")
	}
	m.typ = msgType(d.byte())
	switch m.typ {
	case msgRunTask, msgNewActor, msgCall:
		m.id = d.uvarint()
		if m.typ != msgRunTask {
			m.actor = d.uvarint()
		}
		m.name = d.name()
		m.info = d.info(&m.infoBuf)
		m.infoShared = m.info != nil && m.info != &m.infoBuf
		m.value = d.value()
	case msgCancel, msgKill:
		m.id = d.uvarint()
	case msgOutput:
		m.id = d.uvarint()
		m.name = d.string()
		m.node = d.string()
		m.value = d.value()
	case msgDropActor:
		m.actor = d.uvarint()
	case msgHeartbeat:
	case msgGoodbye:
		m.err = d.error()
	case msgResult:
		m.id = d.uvarint()
		m.value = d.value()
	case msgError:
		m.id = d.uvarint()
		m.err = d.error()
	default:
		return garbled("unknown message type %d", byte(m.typ))
	}
	if d.err != nil {
		return garbled("%v message: %v", m.typ, d.err)
	}
	if len(d.b) != 0 {
		return garbled("%v message has %d trailing bytes", m.typ, len(d.b))
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// errNativeValue is returned when a value holds an unencoded Go value,
// which cannot leave the process.
var errNativeValue = errors.New("the value is not encoded (Value.Native is set): values cross to a worker process only as bytes, so the cluster must use a codec (do not set ray.Options.DisableCodec)")

// appendValue writes a nil Data as 0 and other data as its length plus 1,
// so that nil and empty survive the trip. A Native beside Data is the
// value Data encodes, for in-process work: Data crosses.
func appendValue(b []byte, v backend.Value) ([]byte, error) {
	if v.Native != nil && v.Data == nil {
		return b, errNativeValue
	}
	if v.Data == nil {
		return append(b, 0), nil
	}
	b = binary.AppendUvarint(b, uint64(len(v.Data))+1)
	return append(b, v.Data...), nil
}

func appendMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) > 1 && len(m) <= maxSortedKeys {
		// In key order, so that equal infos encode equally (infoCache).
		var arr [maxSortedKeys]string
		keys := arr[:0]
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, m[k])
		}
		return b
	}
	for k, v := range m {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	return b
}

// maxSortedKeys is the largest map whose keys are encoded in order.
const maxSortedKeys = 32

// infoEnc keeps the last runtime info a connection encoded, with its
// encoding: the infos of a driver's tasks mostly share their strings and
// maps (a node's labels and env, a scheduling class's resources), and an
// info whose fields are the same strings and the very same maps encodes
// the same, so the bytes are copied instead of encoded again (maps sorted
// by key). The key holds the maps, so none of them is freed and its
// address reused while cached; the runtime never modifies a map it has
// handed to running work.
type infoEnc struct {
	task, node  string
	attempt     int
	labels, env map[string]string
	res         backend.Resources
	pl          backend.Placement
	actor       backend.ActorID
	raw         []byte
	ok          bool
}

// sameMap reports whether a and b are the very same map (or both nil).
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b))
}

// append appends the encoding of info, from the cache when it can; a nil
// e encodes.
func (e *infoEnc) append(b []byte, info *backend.RuntimeInfo) []byte {
	if e == nil || info == nil {
		return appendInfo(b, info)
	}
	if e.ok && e.task == info.Task && e.attempt == info.Attempt && e.node == info.Node && e.pl == info.Placement &&
		e.actor == info.Actor && sameMap(e.labels, info.NodeLabels) && sameMap(e.env, info.Env) && sameMap(e.res, info.Resources) {
		return append(b, e.raw...)
	}
	start := len(b)
	b = appendInfo(b, info)
	if n := len(b) - start; n <= maxCachedInfo {
		*e = infoEnc{
			task: info.Task, node: info.Node, attempt: info.Attempt, labels: info.NodeLabels, env: info.Env,
			res: info.Resources, pl: info.Placement, actor: info.Actor, raw: append(e.raw[:0], b[start:]...), ok: true,
		}
	} else {
		e.ok = false
	}
	return b
}

func appendInfo(b []byte, info *backend.RuntimeInfo) []byte {
	if info == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = appendString(b, info.Task)
	b = binary.AppendVarint(b, int64(info.Attempt))
	b = appendString(b, info.Node)
	b = appendMap(b, info.NodeLabels)
	b = binary.AppendUvarint(b, uint64(len(info.Resources)))
	if n := len(info.Resources); n > 1 && n <= maxSortedKeys {
		var arr [maxSortedKeys]string
		keys := arr[:0]
		for k := range info.Resources {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(info.Resources[k]))
		}
	} else {
		for k, v := range info.Resources {
			b = appendString(b, k)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	b = binary.AppendUvarint(b, uint64(info.Placement.Group))
	b = binary.AppendVarint(b, int64(info.Placement.Bundle))
	b = appendMap(b, info.Env)
	return binary.AppendUvarint(b, uint64(info.Actor))
}

// Context errors travel as a kind, so that the driver gets the very
// context.Canceled or context.DeadlineExceeded back.
const (
	ctxNone byte = iota
	ctxCanceled
	ctxDeadline
)

// appendError writes the code, operation and message of err, and its
// *backend.TaskError if it has one.
func appendError(b []byte, err error) []byte {
	kind := ctxNone
	switch err {
	case context.Canceled:
		kind = ctxCanceled
	case context.DeadlineExceeded:
		kind = ctxDeadline
	}
	code := backend.CodeOf(err)
	var op, msg string
	var be *backend.Error
	if errors.As(err, &be) {
		op = be.Op
		if be.Err != nil {
			msg = be.Err.Error()
		}
	} else if err != nil {
		msg = err.Error()
	}
	b = binary.AppendUvarint(b, uint64(code))
	b = append(b, kind)
	b = appendString(b, op)
	b = appendString(b, msg)
	var te *backend.TaskError
	if !errors.As(err, &te) {
		return append(b, teNone)
	}
	if te.Status == 0 {
		b = append(b, teNoStatus)
	} else {
		b = append(b, teStatus)
	}
	b = appendString(b, te.Task)
	b = binary.AppendVarint(b, int64(te.Attempt))
	b = appendString(b, te.Message)
	b = appendBool(b, te.Panicked)
	b = appendString(b, te.Stack)
	if te.Status != 0 {
		b = binary.AppendUvarint(b, uint64(te.Status))
	}
	return b
}

// What follows an error's message: no *backend.TaskError, one, or one
// followed by its HTTP status. A TaskError without a status is encoded as
// before the status existed, so frames of either version without one read
// the same.
const (
	teNone byte = iota
	teNoStatus
	teStatus
)

// decoder reads the encoding above. After the first error every read
// returns a zero value and d.err keeps the error.
type decoder struct {
	b     []byte
	err   error
	cache *infoCache
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bad boolean")
		return false
	}
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a varint that must fit an int32 (attempts, bundle indexes).
func (d *decoder) int() int {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("integer %d out of range", v)
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail("length %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) float64() float64 {
	p := d.bytes(8)
	if len(p) != 8 {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(p))
}

func (d *decoder) string() string {
	return string(d.bytes(d.uvarint()))
}

// name decodes a request's name, sharing the last name decoded with the
// same cache when it is the same.
func (d *decoder) name() string {
	b := d.bytes(d.uvarint())
	if d.cache == nil {
		return string(b)
	}
	if string(b) != d.cache.name { // compares without allocating
		d.cache.name = string(b)
	}
	return d.cache.name
}

func (d *decoder) value() backend.Value {
	n := d.uvarint()
	if n == 0 || d.err != nil {
		return backend.Value{}
	}
	p := d.bytes(n - 1)
	if d.err != nil {
		return backend.Value{}
	}
	return backend.Value{Data: append(make([]byte, 0, len(p)), p...)}
}

// count reads an element count, refusing counts that the bytes left could
// not hold (each element takes at least min bytes), so a garbled count
// cannot make the decoder allocate.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/min) {
		d.fail("count %d exceeds what %d bytes can hold", n, len(d.b))
		return 0
	}
	return int(n)
}

func (d *decoder) stringMap() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.string()
		m[k] = d.string()
	}
	return m
}

// info decodes a runtime info and returns it: nil for none, the
// connection's shared info when its encoding is the cached one or becomes
// it, else buf, decoded into.
func (d *decoder) info(buf *backend.RuntimeInfo) *backend.RuntimeInfo {
	switch d.byte() {
	case 0:
		return nil
	case 1:
	default:
		d.fail("bad runtime info marker")
		return nil
	}
	c := d.cache
	if c != nil && c.shared != nil && bytes.HasPrefix(d.b, c.raw) {
		d.b = d.b[len(c.raw):]
		return c.shared
	}
	start := d.b
	info := buf
	info.Task = d.string()
	info.Attempt = d.int()
	info.Node = d.string()
	info.NodeLabels = d.stringMap()
	if n := d.count(9); n > 0 {
		info.Resources = make(backend.Resources, n)
		for range n {
			k := d.string()
			v := d.float64()
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				d.fail("resource %q has amount %v", k, v)
			}
			info.Resources[k] = v
		}
	}
	info.Placement.Group = backend.PlacementGroupID(d.uvarint())
	info.Placement.Bundle = d.int()
	info.Env = d.stringMap()
	info.Actor = backend.ActorID(d.uvarint())
	if d.err != nil {
		return nil
	}
	if n := len(start) - len(d.b); c != nil && n <= maxCachedInfo {
		c.raw = append(c.raw[:0], start[:n]...)
		shared := *info
		c.shared = &shared // a new one: messages may still hold the last
		return c.shared
	}
	return info
}

func (d *decoder) error() error {
	code := backend.Code(d.uvarint())
	kind := d.byte()
	op := d.string()
	msg := d.string()
	var te *backend.TaskError
	switch hasTE := d.byte(); hasTE {
	case teNone:
	case teNoStatus, teStatus:
		te = &backend.TaskError{}
		te.Task = d.string()
		te.Attempt = d.int()
		te.Message = d.string()
		te.Panicked = d.bool()
		te.Stack = d.string()
		if hasTE == teStatus {
			st := d.uvarint()
			if st < 100 || st > 999 {
				d.fail("bad HTTP status %d", st)
			}
			te.Status = int(st)
		}
	default:
		d.fail("bad task error kind %d", hasTE)
	}
	if d.err != nil {
		return nil
	}
	if int(code) >= len(backend.Codes()) {
		d.fail("unknown error code %d", code)
		return nil
	}
	switch kind {
	case ctxNone:
	case ctxCanceled:
		return context.Canceled
	case ctxDeadline:
		return context.DeadlineExceeded
	default:
		d.fail("bad context error kind %d", kind)
		return nil
	}
	if code == backend.OK {
		code = backend.Unknown
	}
	if te != nil {
		return &backend.Error{Code: code, Op: op, Err: te}
	}
	return &backend.Error{Code: code, Op: op, Err: errors.New(msg)}
}

// frameReader reads frames of at most limit body bytes.
type frameReader struct {
	r     io.Reader
	limit int
	hdr   [frameHeader]byte
	buf   []byte
}

// tooLargeError reports a frame over the limit.
type tooLargeError struct{ size, limit uint64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("message of %s exceeds the limit of %s (MaxMessageSize)", sizeString(e.size), sizeString(e.limit))
}

// buffered returns how many bytes the reader holds already, if it is a
// *bufio.Reader, else 0.
func (fr *frameReader) buffered() int {
	if br, ok := fr.r.(*bufio.Reader); ok {
		return br.Buffered()
	}
	return 0
}

// hasFrame reports whether a whole frame is buffered already, so that
// next returns it without reading from the connection.
func (fr *frameReader) hasFrame() bool {
	br, ok := fr.r.(*bufio.Reader)
	if !ok || br.Buffered() < frameHeader {
		return false
	}
	hdr, err := br.Peek(frameHeader)
	if err != nil {
		return false
	}
	return br.Buffered() >= frameHeader+int(binary.BigEndian.Uint32(hdr))
}

// next reads the next frame body; it is valid until the next call.
func (fr *frameReader) next() ([]byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:])
	if n == 0 {
		return nil, garbled("empty frame")
	}
	if uint64(n) > uint64(fr.limit) {
		return nil, &tooLargeError{size: uint64(n), limit: uint64(fr.limit)}
	}
	// Keep a small buffer; a large message gets its own, which is
	// dropped afterwards.
	var body []byte
	if int(n) <= cap(fr.buf) {
		body = fr.buf[:n]
	} else {
		body = make([]byte, n)
		if n <= 1<<20 {
			fr.buf = body
		}
	}
	if _, err := io.ReadFull(fr.r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// sizeString prints a byte count for people.
func sizeString(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// CheckMessageSize returns the ResourceExhausted error a connection gives
// for a message of size bytes over limit (0 means DefaultMaxMessageSize),
// or nil when it fits. In-process backends call it so that a value that
// would not cross to a worker fails the same way without one.
func CheckMessageSize(size, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxMessageSize
	}
	if size <= limit {
		return nil
	}
	return backend.Wrap(backend.ResourceExhausted, "", &tooLargeError{size: uint64(size), limit: uint64(limit)})
}
