package local_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/backendtest"
	"github.com/goray-dev/goray/backend/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newLocal(t *testing.T, nodes []backendtest.Node) backend.Backend {
	t.Helper()
	spec := local.ClusterSpec{}
	for _, n := range nodes {
		spec.Nodes = append(spec.Nodes, local.NodeSpec{Name: n.Name, Resources: n.Resources, Labels: n.Labels})
	}
	b, err := local.New(spec, nil)
	if err != nil {
		t.Fatalf("local.New: %v", err)
	}
	return b
}

func TestConformance(t *testing.T) {
	backendtest.RunConformanceTests(t, backendtest.Harness{New: newLocal, Capabilities: backendtest.AllCapabilities})
}
