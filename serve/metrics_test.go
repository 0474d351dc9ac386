package serve_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/matryer/is"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/goray-dev/goray/serve"
)

// The metrics are valid Prometheus text as the Prometheus project's own
// parser reads it, with two deployments and whether or not the program
// turned the metrics library's process-wide metadata on: one HELP and one
// TYPE per goray family, each family's samples together, the types right.
func TestMetricsParseAsPrometheus(t *testing.T) {
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	for _, name := range []string{"m1", "m2"} {
		if err := srv.Deploy(context.Background(), deployment(name)); err != nil {
			t.Fatal(err)
		}
		post(t, client, base+"/"+name, EchoIn{Text: "x"})
	}
	for _, metadata := range []bool{false, true} {
		t.Run(map[bool]string{false: "metadata off", true: "metadata on"}[metadata], func(t *testing.T) {
			is := is.New(t)
			vm.ExposeMetadata(metadata)
			defer vm.ExposeMetadata(false)
			var buf bytes.Buffer
			srv.WriteMetrics(&buf)
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("%v\n%s", err, buf.String())
			}
			for name, typ := range map[string]dto.MetricType{
				"goray_serve_requests_total":           dto.MetricType_COUNTER,
				"goray_serve_request_duration_seconds": dto.MetricType_HISTOGRAM,
				"goray_serve_replica_starts_total":     dto.MetricType_COUNTER,
				"goray_serve_replicas":                 dto.MetricType_GAUGE,
				"goray_serve_ongoing_requests":         dto.MetricType_GAUGE,
				"goray_serve_replica_ongoing_requests": dto.MetricType_GAUGE,
				"goray_serve_queued_requests":          dto.MetricType_GAUGE,
			} {
				f := fams[name]
				is.True(f != nil) // the family is there
				is.Equal(f.GetType(), typ)
				is.True(f.GetHelp() != "")
			}
			is.Equal(len(fams["goray_serve_replicas"].GetMetric()), 8) // 2 deployments × 4 states
			is.Equal(len(fams["goray_serve_replica_starts_total"].GetMetric()), 2)
			is.Equal(strings.Count(buf.String(), "# TYPE goray_serve_replicas "), 1)
		})
	}
}

// A Deploy whose MinReplicas the cluster cannot hold says, when its
// context ends, how many replicas were ready and what the others wait for
// (instead of a bare "context deadline exceeded").
func TestDeploySaysWhatItWaitedFor(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	startServer(t, srv)
	d := deployment("toomany")
	d.MinReplicas = 2
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := srv.Deploy(ctx, d)
	is.True(errors.Is(err, context.DeadlineExceeded))
	t.Log(err)
	is.True(strings.Contains(err.Error(), `serve: deploy "toomany": 1 of 2 replicas (MinReplicas) ready, 1 starting, each waiting for a v6e 2x4 slice (the cluster has 1 slices of that shape: 0 free, 1 busy, 0 broken)`))
	is.True(strings.Contains(err.Error(), "it keeps starting in the background"))
}
