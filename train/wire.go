package train

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
)

// The control protocol between a worker and its run's rendezvous in the
// driver: one TCP connection per worker, newline-delimited JSON messages.
// A worker sends join first and gets peers once every rank has joined;
// afterwards it sends reports, output lines, checkpoint loads and a final
// leave, and the driver answers requests and may send abort at any time.
const (
	msgJoin     = "join"     // worker: token, attempt, rank, peer address
	msgPeers    = "peers"    // driver: every rank's peer address
	msgReport   = "report"   // worker: iteration, metrics, checkpoint data
	msgAck      = "ack"      // driver: a request succeeded
	msgLoad     = "load"     // worker: read checkpoint (iteration, rank)
	msgData     = "data"     // driver: checkpoint data
	msgOutput   = "output"   // worker: a line of an external program
	msgPeerLost = "peerlost" // worker: the connection to Peer broke
	msgLeave    = "leave"    // worker: its loop ended (Err empty: success)
	msgAbort    = "abort"    // driver: rank Rank failed; stop
	msgError    = "error"    // driver: a request failed
)

// ctrlMsg is one control message; Type says which fields are set.
type ctrlMsg struct {
	Type      string   `json:"type"`
	ID        uint64   `json:"id,omitempty"` // a request's ID, echoed by its reply
	Token     string   `json:"token,omitempty"`
	Attempt   int      `json:"attempt,omitempty"`
	Rank      int      `json:"rank,omitempty"`
	Peer      int      `json:"peer,omitempty"`
	Addr      string   `json:"addr,omitempty"`
	Addrs     []string `json:"addrs,omitempty"`
	Iteration int      `json:"iteration,omitempty"`
	Metrics   Metrics  `json:"metrics,omitempty"`
	Data      []byte   `json:"data,omitempty"`
	HasData   bool     `json:"has_data,omitempty"`
	Line      string   `json:"line,omitempty"`
	Err       string   `json:"err,omitempty"`
	// Code is an error's code (ray.CodeOf), in an error reply.
	Code     int  `json:"code,omitempty"`
	Canceled bool `json:"canceled,omitempty"`
	// Positions are, in a report, where the worker is in each dataset of
	// the run (see DatasetShard).
	Positions map[string]shardPos `json:"positions,omitempty"`

	// dir is, in a program's report (endpoint.go, never on the wire),
	// the key of the checkpoint directory it committed.
	dir string
}

// ctrlConn is a control connection: messages are written under a lock so
// that several goroutines may send, and read by one goroutine.
type ctrlConn struct {
	c   net.Conn
	dec *json.Decoder
	mu  sync.Mutex
	enc *json.Encoder
}

func newCtrlConn(c net.Conn) *ctrlConn { return newCtrlConnFrom(c, c) }

// newCtrlConnFrom reads the messages from r, which reads c (a reader that
// has peeked at the connection's first byte).
func newCtrlConnFrom(c net.Conn, r io.Reader) *ctrlConn {
	return &ctrlConn{c: c, dec: json.NewDecoder(r), enc: json.NewEncoder(c)}
}

func (cc *ctrlConn) send(m *ctrlMsg) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.enc.Encode(m)
}

func (cc *ctrlConn) recv() (*ctrlMsg, error) {
	var m ctrlMsg
	if err := cc.dec.Decode(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

func (cc *ctrlConn) close() error { return cc.c.Close() }

// Peer frames carry collective data on the ring: a 16-byte header (the
// collective's kind, its sequence number and the payload length) and the
// payload, the raw bytes of the numeric slice in the machine's byte order
// (little-endian on every platform TPU hosts run).
const frameHeader = 16

// opKind names a collective on the wire so that ranks calling different
// collectives get an error instead of garbage.
type opKind uint8

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opAllGather
	opBarrier
	opHello // first frame on a peer connection: payload is the token, seq the rank
)

// Frames of a shard connection: a worker's connection to the rendezvous
// that carries one epoch of its shard of a dataset (see feed.go). Their
// kinds start at 0x10 so that the first byte of a shard connection is
// never '{', the first byte of a control connection.
const (
	opShardOpen   opKind = iota + 0x10 // worker: JSON shardOpen
	opShardRows                        // driver: a JSON array of rows
	opShardCredit                      // worker: one more rows frame may come
	opShardEnd                         // driver: the shard's end; payload: an error, or empty
)

func (k opKind) String() string {
	switch k {
	case opAllReduce:
		return "AllReduce"
	case opBroadcast:
		return "Broadcast"
	case opAllGather:
		return "AllGather"
	case opBarrier:
		return "Barrier"
	case opHello:
		return "hello"
	case opShardOpen:
		return "shard open"
	case opShardRows:
		return "shard rows"
	case opShardCredit:
		return "shard credit"
	case opShardEnd:
		return "shard end"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

func putHeader(h []byte, op opKind, seq uint32, n int) {
	h[0] = byte(op)
	h[1], h[2], h[3] = 0, 0, 0
	binary.LittleEndian.PutUint32(h[4:8], seq)
	binary.LittleEndian.PutUint64(h[8:16], uint64(n))
}

// writeFrame writes one frame with a single writev.
func writeFrame(w io.Writer, op opKind, seq uint32, payload []byte) error {
	var h [frameHeader]byte
	putHeader(h[:], op, seq, len(payload))
	bufs := net.Buffers{h[:], payload}
	_, err := bufs.WriteTo(w)
	return err
}

// readHeader reads a frame header and checks its kind and sequence.
func readHeader(r io.Reader, op opKind, seq uint32) (int, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	gotOp, gotSeq := opKind(h[0]), binary.LittleEndian.Uint32(h[4:8])
	if gotOp != op || gotSeq != seq {
		return 0, &mismatchError{want: op, got: gotOp, wantSeq: seq, gotSeq: gotSeq}
	}
	n := binary.LittleEndian.Uint64(h[8:16])
	if n > 1<<40 {
		return 0, fmt.Errorf("frame of %d bytes is corrupt", n)
	}
	return int(n), nil
}

// readFrame reads a frame of any kind, with a payload of at most limit
// bytes.
func readFrame(r io.Reader, limit int) (opKind, []byte, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(h[8:16])
	if n > uint64(limit) {
		return 0, nil, fmt.Errorf("%s frame of %d bytes is over the limit of %d", opKind(h[0]), n, limit)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return opKind(h[0]), payload, nil
}

// mismatchError: the ranks called different collectives, or the same
// ones in a different order.
type mismatchError struct {
	want, got       opKind
	wantSeq, gotSeq uint32
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("collectives out of step: this rank called %s (collective #%d) but its ring neighbour sent %s (collective #%d); every rank must call the same collectives in the same order",
		e.want, e.wantSeq, e.got, e.gotSeq)
}
