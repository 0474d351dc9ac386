package cluster

import (
	"math/bits"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
	"github.com/goray-dev/goray/tpu"
)

// Chips of a TPU host. Work and bundles that hold a whole number of a
// host's chips, fewer than all, own particular chips: the runtime picks
// them (chipMask) and gives the work Ray's variables for them
// (tpu.PartialHostEnv: TPU_VISIBLE_CHIPS and, for 1 or 2 chips, the
// bounds), as Ray's TPU accelerator manager does for an actor with
// {"TPU": 1}, so that four processes each holding one chip of a v6e 2x2
// host see one chip each rather than all four. A node's chips mask tracks
// which chips are taken, kept in step with its TPU amount.
//
// Whole hosts take every chip and get no variables (the host's env
// stands); fractions of a chip get no chips of their own (as in Ray, the
// process sees the host's chips); slice reservations' bundles take the
// chips backend.SliceBundleEnv names for them, the lowest block first, as
// chipMask picks on a free host.

// chipsOf returns how many chips of n a demand holds, or 0 when n is not
// a TPU host or the demand is not a whole number of its chips.
func chipsOf(n *node, demand []int64) int {
	if n.spec.TPU == nil || len(demand) <= tpuCol {
		return 0
	}
	q := demand[tpuCol]
	one := backend.Quantize(1)
	if q <= 0 || q%one != 0 {
		return 0
	}
	k := q / one
	if k > int64(n.spec.TPU.Shape.ChipsPerHost) {
		return 0
	}
	return int(k)
}

// tpuCol is backend.TPU's column (New adds CPU, memory and TPU first).
const tpuCol = 2

// takeChips picks k free chips of n and marks them taken: the lowest free
// block of k aligned to k when k is a power of two (the device plugin's
// choice, which keeps a process's chips on one NUMA node: 2 of a v7x
// host's 4 are 0,1 or 2,3), else the lowest free chips. It returns the
// mask of the chips, 0 for k == 0.
func (n *node) takeChips(k int) uint64 {
	if k == 0 {
		return 0
	}
	c := n.spec.TPU.Shape.ChipsPerHost
	var m uint64
	if k&(k-1) == 0 {
		block := uint64(1)<<k - 1
		for at := 0; at+k <= c; at += k {
			if n.chips&(block<<at) == 0 {
				m = block << at
				break
			}
		}
	}
	if m == 0 {
		m = n.takeAnyChips(k)
	}
	n.chips |= m
	return m
}

// takeAnyChips returns the lowest k free chips.
func (n *node) takeAnyChips(k int) uint64 {
	var m uint64
	for i := 0; i < n.spec.TPU.Shape.ChipsPerHost && bits.OnesCount64(m) < k; i++ {
		if n.chips&(1<<i) == 0 {
			m |= 1 << i
		}
	}
	return m
}

// putChips gives back chips taken by takeChips.
func (n *node) putChips(m uint64) { n.chips &^= m }

// chipEnv returns the variables of work holding chips m of n: nil for
// none or all of them.
func chipEnv(n *node, m uint64) map[string]string {
	if m == 0 || n.spec.TPU == nil || bits.OnesCount64(m) >= n.spec.TPU.Shape.ChipsPerHost {
		return nil
	}
	var idx []int
	for i := range n.spec.TPU.Shape.ChipsPerHost {
		if m&(1<<i) != 0 {
			idx = append(idx, i)
		}
	}
	env, err := tpu.PartialHostEnv(n.spec.TPU.Shape, idx)
	if err != nil { // the shape was validated when the node joined
		return nil
	}
	return env
}

// workEnv is the env of work on n: the node's and its bundle's (a
// placement group bundle's includes its chips', chipEnv at placement), or
// the node's and its own chips' outside a bundle.
func workEnv(n *node, bu *bundle, chips uint64) map[string]string {
	if bu != nil {
		return admission.OverlayEnv(n.env, bu.env)
	}
	return admission.OverlayEnv(n.env, chipEnv(n, chips))
}

// looseChipsErr is the Infeasible error of TPU work outside a slice
// reservation on a runner whose workers there hold no chips (ChipHolder).
func looseChipsErr(op string, r backend.Resources) error {
	return backend.Errorf(backend.Infeasible, op,
		"%s asks for TPU chips outside a slice reservation, but on this backend only a slice reservation's workers hold chips (others would see no TPU device): reserve a slice or a sub-slice (ray.NewSlicePlacementGroup, SliceSpec.Subslice) and run the work in its bundles (ray.InBundle)", r)
}
