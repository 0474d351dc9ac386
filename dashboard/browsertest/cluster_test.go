//go:build browser

package browsertest_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster starts a simulator with two v6e 4x4 slices, one v5p 2x2x2, one
// v6e 8x8 labelled for 4x4 sub-slices, and a CPU node (the same cluster as
// the dashboard package's own tests).
func cluster(t *testing.T) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes: []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 4}}},
		TPUSlices: []local.TPUSliceSpec{
			{Generation: "v6e", Topology: "4x4", Count: 2},
			{Generation: "v5p", Topology: "2x2x2"},
			{Generation: "v6e", Topology: "8x8", Subslices: []string{"4x4"}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(t.Context(), withOutput{b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// outputLine is what the workers of node cpu wrote, as a backend with
// worker processes keeps it (backend.OutputReader).
const outputLine = "(task browsertest.say, node=cpu, pid=7) <b>not bold</b> & done"

type withOutput struct{ *local.Backend }

func (withOutput) RecentOutput(node string) []string {
	if node == "cpu" {
		return []string{outputLine}
	}
	return nil
}

// other names the v6e 4x4 slice that is not name.
func other(name string) string {
	if name == "v6e-16-0" {
		return "v6e-16-1"
	}
	return "v6e-16-0"
}

// failing is a task that fails with its input as the error.
var failing = ray.NewTask("browsertest.failing", func(ctx context.Context, msg string) (int, error) {
	return 0, errors.New(msg)
})
