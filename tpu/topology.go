package tpu

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxTopologyDim is the largest value ParseTopology accepts for one
// dimension. It is far above any real slice (the largest Ray knows is v3
// 32x32) and keeps Chips from overflowing on 32-bit platforms.
const MaxTopologyDim = 1024

// Topology is the chip grid of a TPU slice, such as 4x4 (2D) or 2x2x2 (3D).
// Build one with ParseTopology; every dimension of a parsed Topology is in
// 1..MaxTopologyDim.
//
// Topology is a comparable value type, usable with == and as a map key. The
// zero value is the empty topology: IsZero reports true, String returns ""
// and Chips returns 0; no generation accepts it. A Topology is immutable and
// safe for concurrent use.
type Topology struct {
	// d holds the dimensions; unused trailing entries are 0.
	d [3]int
}

// ParseTopology parses a chip grid such as "4x4" or "2x2x2". It ignores case
// and spaces around the string and around each dimension (" 2X2x2 " is
// 2x2x2). It rejects empty strings, anything but 2 or 3 dimensions, and any
// dimension that is not a plain decimal integer in 1..MaxTopologyDim.
//
// ParseTopology checks the syntax only; use Generation.ParseTopology to also
// check that a generation offers the slice. Errors are *TopologyError values
// wrapping ErrInvalidTopology.
func ParseTopology(s string) (Topology, error) {
	t, err := parseTopology(s)
	if err != nil {
		return Topology{}, err
	}
	return t, nil
}

// parseTopology is ParseTopology with a concrete error type, so callers
// can add context to the error before returning it.
func parseTopology(s string) (Topology, *TopologyError) {
	fail := func(format string, args ...any) (Topology, *TopologyError) {
		return Topology{}, &TopologyError{Input: s, Reason: fmt.Sprintf(format, args...)}
	}
	norm := strings.ToLower(strings.TrimSpace(s))
	if norm == "" {
		return fail(`empty; want a chip grid such as "4x4" or "2x2x2"`)
	}
	parts := strings.Split(norm, "x")
	if len(parts) == 1 {
		return fail(`not a chip grid; want 2 dimensions (such as "4x4") or 3 (such as "2x2x2")`)
	}
	if len(parts) > 3 {
		return fail(`has %d dimensions; want 2 (such as "4x4") or 3 (such as "2x2x2")`, len(parts))
	}
	var t Topology
	for i, p := range parts {
		p = strings.TrimSpace(p)
		n, ok := parseDim(p)
		if !ok {
			return fail("dimension %d is %q; want a positive integer no larger than %d", i+1, p, MaxTopologyDim)
		}
		t.d[i] = n
	}
	return t, nil
}

// MustParseTopology is like ParseTopology but panics on error. It is meant
// for constants in tests and static tables.
func MustParseTopology(s string) Topology {
	t, err := ParseTopology(s)
	if err != nil {
		panic(err)
	}
	return t
}

// parseDim parses one dimension: ASCII digits only (no sign), value in
// 1..MaxTopologyDim.
func parseDim(s string) (int, bool) {
	if s == "" || len(s) > 8 {
		return 0, false
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > MaxTopologyDim {
		return 0, false
	}
	return n, true
}

// IsZero reports whether t is the zero (empty) topology.
func (t Topology) IsZero() bool { return t == Topology{} }

// NumDims returns the number of dimensions: 2, 3, or 0 for the zero value.
func (t Topology) NumDims() int {
	n := 0
	for n < len(t.d) && t.d[n] != 0 {
		n++
	}
	return n
}

// Dims returns the dimensions in order, such as [4 4] for 4x4. It returns
// nil for the zero value. The caller owns the returned slice.
func (t Topology) Dims() []int {
	n := t.NumDims()
	if n == 0 {
		return nil
	}
	return append([]int(nil), t.d[:n]...)
}

// Chips returns the number of chips in the grid (the product of the
// dimensions), or 0 for the zero value.
func (t Topology) Chips() int {
	if t.IsZero() {
		return 0
	}
	chips := 1
	for _, n := range t.d[:t.NumDims()] {
		chips *= n
	}
	return chips
}

// String returns the canonical form, such as "4x4" or "2x2x2", which
// ParseTopology parses back to t. It returns "" for the zero value.
func (t Topology) String() string {
	var b strings.Builder
	for i, n := range t.d[:t.NumDims()] {
		if i > 0 {
			b.WriteByte('x')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// bounds3 returns the dimensions padded to three with 1, the axis order
// libtpu's bounds variables use: 4x4 → (4, 4, 1).
func (t Topology) bounds3() [3]int {
	b := t.d
	for i := range b {
		if b[i] == 0 {
			b[i] = 1
		}
	}
	return b
}

// MarshalText implements encoding.TextMarshaler; it returns String().
func (t Topology) MarshalText() ([]byte, error) {
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseTopology. Empty
// text yields the zero Topology.
func (t *Topology) UnmarshalText(text []byte) error {
	if strings.TrimSpace(string(text)) == "" {
		*t = Topology{}
		return nil
	}
	parsed, err := ParseTopology(string(text))
	if err != nil {
		return err
	}
	*t = parsed
	return nil
}
