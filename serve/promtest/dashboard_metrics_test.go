package promtest_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/matryer/is"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

var (
	okTask = ray.NewTask("promtest.ok", func(ctx context.Context, x int) (int, error) { return x, nil })
	// A name with the characters the text format escapes.
	oddTask  = ray.NewTask("promtest.\"odd\"\\name\n", func(ctx context.Context, x int) (int, error) { return x, nil })
	failTask = ray.NewTask("promtest.fail", func(ctx context.Context, x int) (int, error) { return 0, errors.New("on purpose") })
)

// The runtime's metrics are valid Prometheus text as the Prometheus
// project's own parser reads it, with the right types and the values of a
// running program: tasks by name, actors, slices by state, a reservation
// waiting and one granted.
func TestDashboardMetricsParseAsPrometheus(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 1}},
	}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	for range 3 {
		_, err := okTask.Remote(ctx, c, 1).Get(ctx)
		is.NoErr(err)
	}
	_, err = oddTask.Remote(ctx, c, 1).Get(ctx)
	is.NoErr(err)
	_, err = failTask.Remote(ctx, c, 1).Get(ctx)
	is.True(err != nil)
	is.NoErr(class.Remote(ctx, c, struct{}{}).Ready(ctx))

	first, err := reserve(ctx, b, "held")
	is.NoErr(err)
	defer b.RemovePlacementGroup(ctx, first.Group)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reserve(wctx, b, "waiting") //nolint:errcheck // cancelled below
	}()
	defer func() { cancel(); <-done }()
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	// Wait for the second reservation to queue (the view shows it).
	deadline := time.Now().Add(30 * time.Second)
	for len(d.View(ctx).Pending) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second reservation never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var buf bytes.Buffer
	is.NoErr(d.WriteMetrics(ctx, &buf))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for name, typ := range map[string]dto.MetricType{
		"goray_tasks_submitted_total":                 dto.MetricType_COUNTER,
		"goray_tasks_finished_total":                  dto.MetricType_COUNTER,
		"goray_tasks_failed_total":                    dto.MetricType_COUNTER,
		"goray_work_queued":                           dto.MetricType_GAUGE,
		"goray_actors":                                dto.MetricType_GAUGE,
		"goray_placement_groups":                      dto.MetricType_GAUGE,
		"goray_nodes":                                 dto.MetricType_GAUGE,
		"goray_resources":                             dto.MetricType_GAUGE,
		"goray_tpu_slices":                            dto.MetricType_GAUGE,
		"goray_slice_reservations_waiting":            dto.MetricType_GAUGE,
		"goray_slice_reservation_oldest_wait_seconds": dto.MetricType_GAUGE,
		"goray_slice_reservation_wait_seconds":        dto.MetricType_HISTOGRAM,
		"goray_worker_restarts_total":                 dto.MetricType_COUNTER,
	} {
		f := fams[name]
		if f == nil {
			t.Fatalf("no family %s in\n%s", name, buf.String())
		}
		is.Equal(f.GetType(), typ)
		is.True(f.GetHelp() != "")
	}
	value := func(family string, labels map[string]string) float64 {
		t.Helper()
		for _, m := range fams[family].GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && got[k] == v
			}
			if match {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no %s%v in\n%s", family, labels, buf.String())
		return 0
	}
	is.Equal(value("goray_tasks_submitted_total", map[string]string{"name": "promtest.ok"}), 3.0)
	is.Equal(value("goray_tasks_finished_total", map[string]string{"name": "promtest.ok"}), 3.0)
	is.Equal(value("goray_tasks_failed_total", map[string]string{"name": "promtest.fail"}), 1.0)
	is.Equal(value("goray_tasks_finished_total", map[string]string{"name": "promtest.\"odd\"\\name\n"}), 1.0) // escaped and read back
	is.Equal(value("goray_actors", map[string]string{"class": "promtest.model", "state": "ALIVE"}), 1.0)
	is.Equal(value("goray_tpu_slices", map[string]string{"generation": "v6e", "topology": "2x2", "state": "reserved"}), 1.0)
	is.Equal(value("goray_tpu_slices", map[string]string{"generation": "v6e", "topology": "2x2", "state": "free"}), 0.0)
	is.Equal(value("goray_slice_reservations_waiting", map[string]string{"generation": "v6e", "topology": "2x2"}), 1.0)
	is.Equal(value("goray_nodes", map[string]string{"state": "alive"}), 2.0)
	h := fams["goray_slice_reservation_wait_seconds"].GetMetric()[0].GetHistogram()
	is.Equal(h.GetSampleCount(), uint64(1)) // the granted reservation
	is.Equal(h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount(), uint64(1))
}

func reserve(ctx context.Context, b *local.Backend, name string) (*backend.SliceReservation, error) {
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x2", 0)
	if err != nil {
		return nil, err
	}
	return b.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: name})
}
