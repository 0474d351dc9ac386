package train_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) {
	ray.Main() // the test binary is the worker processes' executable
	goleak.VerifyTestMain(m)
}

// newCluster starts a simulated cluster of n v6e slices of topology topo,
// in process or with worker processes.
func newCluster(t testing.TB, topo string, n int, procs bool) (*local.Backend, *ray.Cluster) {
	t.Helper()
	opts := &local.Options{}
	if procs {
		opts.Processes = &local.ProcessOptions{Count: 2}
	}
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: topo, Count: n}}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}
