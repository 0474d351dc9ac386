package promtest_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/matryer/is"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

type model_ struct{}

var (
	class = ray.NewActorClass("promtest.model", func(ctx context.Context, _ struct{}) (*model_, error) { return &model_{}, nil })
	call  = ray.NewMethod(class, "call", func(ctx context.Context, _ *model_, in string) (string, error) { return in, nil })
)

// The metrics are valid Prometheus text as the Prometheus project's own
// parser reads it, with two deployments and whether or not the program
// turned the metrics library's process-wide metadata on: one HELP and one
// TYPE per goray family, each family's samples together, the types right.
func TestMetricsParseAsPrometheus(t *testing.T) {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", Count: 2, ChipsPerHost: 4}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := serve.New(c, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Shutdown(ctx)
	for _, name := range []string{"m1", "m2"} {
		err := srv.Deploy(ctx, serve.Deployment{Name: name, Replica: serve.Actor(class, struct{}{}, serve.Unary(call)),
			Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+l.Addr().String()+"/"+name, "application/json", strings.NewReader(`"x"`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
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
			is.Equal(len(fams["goray_serve_requests_total"].GetMetric()), 2)
			is.Equal(strings.Count(buf.String(), "# TYPE goray_serve_replicas "), 1)
		})
	}
}
