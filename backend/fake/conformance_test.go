package fake_test

import (
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/fake"
)

// TestConformance runs the shared suite. The fake is synchronous and has no
// nodes, so it declares none of the optional capabilities.
func TestConformance(t *testing.T) {
	backendtest.RunConformanceTests(t, backendtest.Harness{
		New:          func(t *testing.T, _ []backendtest.Node) backend.Backend { return fake.New(nil) },
		Capabilities: backendtest.Capabilities{},
	})
}
