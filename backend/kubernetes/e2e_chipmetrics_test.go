//go:build e2e

package kubernetes

import (
	"testing"

	"github.com/matryer/is"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// TestE2EChipMetrics: the harness's TPU nodes serve the GKE TPU device
// plugin's metrics on their InternalIP, in its names and format; the
// backend reads them per node and chip, and the dashboard shows them on
// the slice's chip grid and exports them.
func TestE2EChipMetrics(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	nodes, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "pool", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	is.Equal(len(nodes), 2)
	is.NoErr(cp.SetChipMetrics(nodes[1].Name, 2, kubeharness.ChipMetrics{DutyCycle: 75, TensorCoreUtilization: 40, MemoryBandwidthUtilization: -1, HBMUsed: 8 << 30, HBMTotal: 32 << 30}))
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	cfg := testConfig()
	cfg.Client = client
	cfg.Worker.Image = workerImage
	b, err := New(ctx, cfg)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()

	read, err := b.ChipMetrics(ctx)
	is.NoErr(err)
	is.Equal(len(read), 2)
	for _, n := range read {
		is.Equal(n.Err, "")
		is.Equal(len(n.Chips), 4)
	}
	got := read[1].Chips[2]
	is.Equal(read[1].Node, nodes[1].Name)
	is.Equal(got.Device, 2)
	is.Equal(got.DutyCycle, 75.0)
	is.Equal(got.TensorCoreUtilization, 40.0)
	is.Equal(got.HBMUsed, float64(8<<30))
	is.Equal(got.HBMTotal, float64(32<<30))
	is.Equal(got.MemoryBandwidthUtilization, -1.0) // not served: not reported
	is.Equal(read[0].Chips[0].DutyCycle, 0.0)      // an idle chip
	is.Equal(read[0].Chips[0].HBMTotal, float64(32<<30))

	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	v := d.View(ctx)
	is.Equal(len(v.Problems), 0)
	busy := 0
	for _, ch := range v.Shapes[0].Slices[0].Chips {
		is.True(ch.Metrics != nil) // every chip of the slice
		if ch.Metrics.DutyCycle == 75 {
			busy++
			is.Equal(v.Shapes[0].Slices[0].Hosts[ch.Worker].Node, nodes[1].Name)
		}
	}
	is.Equal(busy, 1)
}
