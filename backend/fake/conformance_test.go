package fake_test

import (
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/fake"
)

// TestConformance runs the shared suite. The fake is synchronous and has no
// nodes or capacity, so of the optional capabilities it declares only those
// that need neither: it reports its state, and it reserves slices (always
// fresh ones, with each host's real worker env).
func TestConformance(t *testing.T) {
	backendtest.RunConformanceTests(t, backendtest.Harness{
		New:          func(t *testing.T, _ []backendtest.Node) backend.Backend { return fake.New(nil) },
		Capabilities: backendtest.Capabilities{Snapshot: true, SliceReservations: true},
	})
}
