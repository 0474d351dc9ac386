package cluster

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// fleet returns the hosts of slices v6e 4x4 slices (four hosts each) with
// Ray's TPU resources, the slice's name among them.
func fleet(tb testing.TB, slices int) []Node {
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		tb.Fatal(err)
	}
	var out []Node
	for s := range slices {
		name := fmt.Sprintf("slice-%d", s)
		for w := range shape.Hosts() {
			res := backend.Resources{backend.CPU: 180, backend.Memory: 720e9}
			for k, v := range tpu.HostResources(shape, name, w) {
				res[k] = v
			}
			out = append(out, Node{
				Name: fmt.Sprintf("%s-w%d", name, w), Resources: res,
				Labels: tpu.HostLabels(shape, name, "pool-"+name, w),
				TPU:    &TPUHost{Slice: name, Shape: shape, WorkerID: w},
			})
		}
	}
	return out
}

// stubs: New only keeps them; nothing here starts the runtime.
type stubSource struct{ NodeSource }
type stubRunner struct{ Runner }

func newFleet(tb testing.TB, slices int) *Runtime {
	rt, err := New(stubSource{}, stubRunner{}, Options{Nodes: fleet(tb, slices)})
	if err != nil {
		tb.Fatal(err)
	}
	return rt
}

// Each slice's name is a resource of its own hosts only; the runtime's
// per-node vectors must not grow a column per slice, which made a
// driver's memory nodes × slices.
func TestSliceNamesShareOneColumn(t *testing.T) {
	small, large := newFleet(t, 4), newFleet(t, 400)
	width := len(small.nodes[0].capac)
	for _, rt := range []*Runtime{small, large} {
		for _, n := range rt.nodes {
			if len(n.capac) != width || len(n.free) != width {
				t.Fatalf("node %s of a fleet of %d slices has vectors of %d and %d resources; with 4 slices, %d",
					n.name, len(rt.nodes)/4, len(n.capac), len(n.free), width)
			}
		}
	}
	if len(large.resNames) != len(small.resNames) {
		t.Errorf("400 slices make %d resource columns, 4 slices %d: %v", len(large.resNames), len(small.resNames), large.resNames)
	}
}

// BenchmarkTPUFleet builds a runtime over a fleet of v6e 4x4 slices
// (four hosts each, with Ray's resources: every slice's name is one)
// and reports, per node, the heap the runtime keeps (retained-B/node,
// after GC) and the time to add it. Flat from 1,024 to 8,192 nodes means
// a node costs the same however many slices there are.
//
//	go test -run '^$' -bench TPUFleet -count 3 ./backend/cluster/
func BenchmarkTPUFleet(b *testing.B) {
	for _, nodes := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			specs := fleet(b, nodes/4)
			var retained uint64
			for b.Loop() {
				var before, after runtime.MemStats
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				rt, err := New(stubSource{}, stubRunner{}, Options{Nodes: specs})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(rt)
				b.StartTimer()
				retained += after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
			}
			b.ReportMetric(float64(retained)/float64(b.N)/float64(nodes), "retained-B/node")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nodes), "ns/node")
		})
	}
}
