// Package backendtest is the conformance suite every goray backend runs:
// the behaviours of package ray's API that users rely on, checked through
// the public API on a real instance of the backend.
//
// A backend's test calls [RunConformanceTests] with a [Harness] that builds
// the backend for a given set of nodes and declares the capabilities the
// backend has; tests of missing capabilities are skipped, with the reason.
//
//	func TestConformance(t *testing.T) {
//		backendtest.RunConformanceTests(t, backendtest.Harness{
//			New: func(t *testing.T, nodes []backendtest.Node) backend.Backend { ... },
//			Capabilities: backendtest.AllCapabilities,
//		})
//	}
//
// The suite registers its tasks and actors under names starting with
// "backendtest.". Worker processes of a multi-process backend must import
// this package so that they register them too.
package backendtest

import (
	"testing"
	"time"

	"github.com/goray-dev/goray/backend"
)

// Node describes one node of the cluster a test asks for.
type Node struct {
	Name      string
	Resources backend.Resources
	Labels    map[string]string
}

// Capabilities declares what a backend does. A backend lacking one skips the
// tests that need it.
type Capabilities struct {
	// Concurrent: tasks and actor calls run concurrently with the caller
	// (not synchronously inside Remote).
	Concurrent bool
	// ResourceAccounting: nodes have capacities; work that does not fit now
	// queues, work that can never fit fails with Infeasible, placement
	// groups honour their strategies.
	ResourceAccounting bool
	// Labels: node selectors and bundle label selectors are honoured.
	Labels bool
	// FaultInjection: the backend implements backend.FaultInjector.
	FaultInjection bool
	// Snapshot: the backend implements backend.Snapshotter with node state.
	Snapshot bool
	// SliceReservations: the backend implements backend.SliceReserver: a
	// reservation of one or more slices runs work on each host with that
	// host's worker env (and multislice env) and is released.
	SliceReservations bool
	// TPUSlices: SliceReservations, and the backend finds a finite set of
	// slices from node labels (see DefaultTPUNodes), lists them, makes
	// requests wait for busy slices and fails requests no slice could
	// serve.
	TPUSlices bool
	// Subslices: TPUSlices, and sub-slice reservations
	// (SliceRequest.Subslice) are granted from idle slices, as Ray's
	// subslice_placement_group does.
	Subslices bool
	// ChipsOutsideReservations: TPUSlices, and work outside a slice
	// reservation that asks for some of a host's chips gets chips of its
	// own (TPU_VISIBLE_CHIPS). Without it (a runner whose workers outside
	// reservations hold no chips and cannot claim hosts for such work;
	// see cluster.ChipHolder) such work must be refused as Infeasible.
	ChipsOutsideReservations bool
}

// AllCapabilities is every capability.
var AllCapabilities = Capabilities{
	Concurrent: true, ResourceAccounting: true, Labels: true, FaultInjection: true, Snapshot: true, SliceReservations: true, TPUSlices: true,
	Subslices: true, ChipsOutsideReservations: true,
}

// Harness builds backends for the suite.
type Harness struct {
	// New returns a new, unstarted backend whose cluster has the given
	// nodes (backends without nodes may ignore them). The suite starts it
	// with ray.NewCluster and closes it.
	New func(t *testing.T, nodes []Node) backend.Backend
	// Capabilities of the backend.
	Capabilities Capabilities
	// Patience bounds each test's context; 0 means 20s. A backend whose
	// workers are real processes started by someone else (pods) may need
	// more for the tests that reserve and run on many slices in a row.
	// TPUSlices/Contention bounds each of its reservations (with the work
	// run on the slice) by it instead, not the whole test.
	Patience time.Duration
	// ContentionRounds is how many slices each of TPUSlices/Contention's 8
	// goroutines reserves in turn (running work on every host of each, so
	// that a second grant of a held slice would be seen); 0 means 5. A
	// backend whose reservations start processes (pods) can keep CI time
	// down with fewer: 8 goroutines on 2 slices contend from the first
	// round.
	ContentionRounds int
}

// DefaultNodes is the cluster most tests use: three nodes of 4 CPUs and
// 8 GiB in zones a, b and c; node-2 also has one "special" unit.
func DefaultNodes() []Node {
	return []Node{
		{Name: "node-0", Resources: backend.Resources{backend.CPU: 4, backend.Memory: 8 << 30}, Labels: map[string]string{"zone": "a"}},
		{Name: "node-1", Resources: backend.Resources{backend.CPU: 4, backend.Memory: 8 << 30}, Labels: map[string]string{"zone": "b"}},
		{Name: "node-2", Resources: backend.Resources{backend.CPU: 4, backend.Memory: 8 << 30, "special": 1}, Labels: map[string]string{"zone": "c"}},
	}
}
