package clustertest_test

import (
	"fmt"
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/backend/cluster/clustertest"
	"github.com/goray-dev/goray/tpu"
)

// nodes is a CPU node and one v6e 4x4 slice.
func nodes() []cluster.Node {
	shape := tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("4x4"), ChipsPerHost: 4}
	out := []cluster.Node{{Name: "cpu", Resources: backend.Resources{backend.CPU: 8}}}
	for w := range shape.Hosts() {
		out = append(out, cluster.Node{
			Name:      fmt.Sprintf("tpu-w%d", w),
			Resources: backend.Resources{backend.CPU: 8, backend.TPU: 4},
			Labels:    tpu.HostLabels(shape, "tpu", "tpu", w),
			TPU:       &cluster.TPUHost{Slice: "tpu", Shape: shape, WorkerID: w},
		})
	}
	return out
}

func TestStaticSource(t *testing.T) {
	clustertest.TestSource(t, clustertest.SourceHarness{
		New: func(t *testing.T) (cluster.NodeSource, []cluster.Node) {
			ns := nodes()
			return cluster.NewStaticSource(ns), ns
		},
		Faults: true,
	})
}

func TestRunner(t *testing.T) {
	clustertest.TestRunner(t, func(t *testing.T) (cluster.Runner, cluster.Node) {
		return cluster.GoroutineRunner{}, nodes()[0]
	})
}
