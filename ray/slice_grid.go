package ray

import (
	"fmt"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// FormatSlices renders each slice's chip grid, one cell per chip: who holds
// it, then the worker ID of its host.
//
//	A, B, ...  held by a reservation (named in the slice's header line)
//	#          in use by work outside any reservation
//	.          free
//	x          on a dead host
//
// For example "A0 A0 A1 A1" is a row of chips held by reservation A, the
// first two on worker 0, the next two on worker 1.
// 3D topologies are drawn as z-layers side by side. Examples and tools use
// it to show where slices landed.
func FormatSlices(states []SliceState) string {
	var b strings.Builder
	letters := map[backend.PlacementGroupID]byte{}
	for _, st := range states {
		shape, err := tpu.NewSliceShape(tpu.Generation(st.Generation), st.Topology, st.ChipsPerHost)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", st.Name, err)
			continue
		}
		mark := byte('.')
		status := "free"
		if st.ReservedBy != 0 {
			l, ok := letters[st.ReservedBy]
			if !ok {
				l = 'A' + byte(len(letters)%26)
				letters[st.ReservedBy] = l
			}
			mark = l
			name := st.ReservedName
			if name == "" {
				name = st.ReservedBy.String()
			}
			status = fmt.Sprintf("%c = %s", l, name)
		} else if !st.Idle && st.Intact {
			status = "busy"
		}
		if !st.Intact {
			status += ", not intact"
		}
		fmt.Fprintf(&b, "%s (%s, %d hosts): %s\n", st.Name, shape, len(st.Hosts), status)
		width := len(fmt.Sprint(len(st.Hosts) - 1))
		dims := shape.Topology.Dims()
		x, y, z := dims[0], dims[1], 1
		if len(dims) == 3 {
			z = dims[2]
		}
		for row := range y {
			b.WriteString("  ")
			for layer := range z {
				if layer > 0 {
					b.WriteString("   ")
				}
				for col := range x {
					c := mark
					w := shape.WorkerOfChip(col, row, layer)
					if w >= 0 && w < len(st.Hosts) {
						h := st.Hosts[w]
						switch {
						case !h.Alive:
							c = 'x'
						case st.ReservedBy == 0 && h.ChipsInUse > 0:
							c = '#'
						}
					}
					if col > 0 {
						b.WriteByte(' ')
					}
					b.WriteByte(c)
					fmt.Fprintf(&b, "%-*d", width, w)
				}
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// FormatSliceSummary renders [SummarizeSlices] as a table.
func FormatSliceSummary(sums []SliceSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-10s %6s %6s %6s %8s\n", "GEN", "TOPOLOGY", "TOTAL", "INTACT", "FREE", "RESERVED")
	for _, s := range sums {
		fmt.Fprintf(&b, "%-10s %-10s %6d %6d %6d %8d\n", s.Generation, s.Topology, s.Total, s.Intact, s.Free, s.Reserved)
	}
	return b.String()
}
