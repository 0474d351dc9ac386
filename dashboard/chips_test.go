package dashboard_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// withChips is a simulator whose TPU nodes report chip metrics, as the
// Kubernetes backend reads them from the GKE TPU device plugin.
type withChips struct {
	*local.Backend
	nodes []backend.NodeChips
}

func (w withChips) ChipMetrics(context.Context) ([]backend.NodeChips, error) { return w.nodes, nil }

// Chip metrics land on their chips in the grid (a host's chips in grid
// order take its device indices), in the metrics and in goray status; a
// node that could not be read is a problem.
func TestChipMetricsInView(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2"}}}, nil)
	is.NoErr(err)
	states, err := b.Slices(t.Context())
	is.NoErr(err)
	host := states[0].Hosts[0].Node
	chip := func(dev int, duty float64) tpu.ChipMetrics {
		return tpu.ChipMetrics{Device: dev, DutyCycle: duty, TensorCoreUtilization: duty / 2, MemoryBandwidthUtilization: -1, HBMUsed: 8 << 30, HBMTotal: 32 << 30}
	}
	c, err := ray.NewCluster(t.Context(), withChips{b, []backend.NodeChips{
		{Node: host, Chips: []tpu.ChipMetrics{chip(0, 10), chip(1, 20), chip(2, 30), chip(3, 100)}},
		{Node: "gone-0", Err: "read the TPU device plugin's metrics at 10.0.0.9:2112: connection refused"},
	}}, nil)
	is.NoErr(err)
	defer c.Close()
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	v := d.View(t.Context())
	s := v.Shapes[0].Slices[0]
	var duty []float64
	for _, ch := range s.Chips {
		is.True(ch.Metrics != nil) // every chip of the one host
		duty = append(duty, ch.Metrics.DutyCycle)
	}
	is.Equal(duty, []float64{10, 20, 30, 100}) // grid order takes device order
	is.Equal(v.Problems, []string{"TPU chip metrics of gone-0: read the TPU device plugin's metrics at 10.0.0.9:2112: connection refused"})

	var buf bytes.Buffer
	is.NoErr(dashboard.WriteMetrics(&buf, v))
	for _, want := range []string{
		`goray_tpu_chip_duty_cycle_percent{device="3",node="` + host + `",slice="` + s.Name + `"} 100`,
		`goray_tpu_chip_tensorcore_utilization_percent{device="1",node="` + host + `",slice="` + s.Name + `"} 10`,
		`goray_tpu_chip_hbm_used_bytes{device="0",node="` + host + `",slice="` + s.Name + `"} 8589934592`,
		`goray_tpu_chip_hbm_total_bytes{device="0",node="` + host + `",slice="` + s.Name + `"} 34359738368`,
	} {
		is.True(strings.Contains(buf.String(), want+"\n")) // exported
	}
	buf.Reset()
	is.NoErr(dashboard.WriteStatus(&buf, v))
	if !strings.Contains(strings.Join(strings.Fields(buf.String()), " "), s.Name+" duty cycle 40% (busiest chip 100%), tensor cores 20%, HBM 32.0/128.0 GiB") {
		t.Errorf("status lacks the slice's chip usage:\n%s", buf.String())
	}
}
