package cluster

import (
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

func TestTakeChips(t *testing.T) {
	is := is.New(t)
	host := func(topology string) *node {
		shape, err := tpu.NewSliceShape(tpu.V6e, topology, 0)
		is.NoErr(err)
		return &node{spec: Node{TPU: &TPUHost{Slice: "s", Shape: shape}}}
	}
	n := host("2x4") // one host of 8 chips
	is.Equal(n.takeChips(1), uint64(0b1))
	is.Equal(n.takeChips(2), uint64(0b1100))     // the aligned pair after chip 0
	is.Equal(n.takeChips(4), uint64(0b11110000)) // the aligned half
	is.Equal(n.takeChips(1), uint64(0b10))
	n.putChips(0b1100)
	is.Equal(n.chips, uint64(0b11110011))
	is.Equal(n.takeChips(0), uint64(0))

	n = host("2x2") // 4 chips
	for range 3 {
		n.takeChips(1)
	}
	n.putChips(0b10)
	is.Equal(n.takeChips(2), uint64(0b1010)) // no aligned pair is free: the lowest two

	// chipsOf: whole numbers of chips, up to the host's, on TPU hosts only.
	v := func(tpus float64) []int64 { return []int64{0, 0, backend.Quantize(tpus)} }
	is.Equal(chipsOf(n, v(2)), 2)
	is.Equal(chipsOf(n, v(4)), 4)
	is.Equal(chipsOf(n, v(0.5)), 0)
	is.Equal(chipsOf(n, v(0)), 0)
	is.Equal(chipsOf(n, []int64{1}), 0)
	is.Equal(chipsOf(&node{}, v(1)), 0)

	// chipEnv: Ray's variables for a part of the host, none for all of it.
	is.Equal(chipEnv(n, 0b1100), map[string]string{tpu.EnvVisibleChips: "2,3", tpu.EnvChipsPerHostBounds: "1,2,1", tpu.EnvHostBounds: "1,1,1"})
	is.Equal(chipEnv(n, 0b1111), map[string]string(nil))
	is.Equal(chipEnv(n, 0), map[string]string(nil))
}
