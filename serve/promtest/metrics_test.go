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

type muxModel struct{}

var (
	muxClass  = ray.NewActorClass("promtest.mux", func(ctx context.Context, _ struct{}) (*muxModel, error) { return &muxModel{}, nil })
	muxModels = serve.NewModels(muxClass, "models", serve.ModelLoader[*muxModel, string]{
		Load: func(ctx context.Context, _ *muxModel, id string) (string, error) { return "weights of " + id, nil },
	})
	muxCall = ray.NewMethod(muxClass, "call", func(ctx context.Context, m *muxModel, in struct{ serve.MultiplexedModel }) (string, error) {
		return muxModels.Get(ctx, m, in.MultiplexedModelID)
	})
)

// The per-model metrics of a multiplexed deployment parse as Prometheus
// text with their types, one series per model that loaded, and a model
// ID with the characters the format escapes comes out escaped.
func TestModelMetricsParseAsPrometheus(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 8}}}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	srv := serve.New(c, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	go srv.Serve(l)
	defer srv.Shutdown(ctx)
	is.NoErr(srv.Deploy(ctx, serve.Deployment{Name: "mux", Replica: serve.Actor(muxClass, struct{}{}, serve.Unary(muxCall), serve.Multiplexed(muxModels)),
		Resources: ray.Resources{ray.CPU: 1}, Multiplex: &serve.Multiplex{MaxModelsPerReplica: 1}}))
	for _, model := range []string{"a", `q"uo\te`, "a"} {
		req, err := http.NewRequest(http.MethodPost, "http://"+l.Addr().String()+"/mux", strings.NewReader(`{}`))
		is.NoErr(err)
		req.Header.Set(serve.ModelIDHeader, model)
		resp, err := http.DefaultClient.Do(req)
		is.NoErr(err)
		resp.Body.Close()
		is.Equal(resp.StatusCode, 200)
	}
	var buf bytes.Buffer
	srv.WriteMetrics(&buf)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for name, typ := range map[string]dto.MetricType{
		"goray_serve_model_requests_total":  dto.MetricType_COUNTER,
		"goray_serve_model_loads_total":     dto.MetricType_COUNTER,
		"goray_serve_model_evictions_total": dto.MetricType_COUNTER,
		"goray_serve_model_load_seconds":    dto.MetricType_HISTOGRAM,
		"goray_serve_replica_models_loaded": dto.MetricType_GAUGE,
	} {
		f := fams[name]
		if f == nil {
			t.Fatalf("no family %s in\n%s", name, buf.String())
		}
		is.Equal(f.GetType(), typ)
		is.True(f.GetHelp() != "")
	}
	byModel := map[string]float64{}
	for _, m := range fams["goray_serve_model_loads_total"].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "model" {
				byModel[lp.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	is.Equal(byModel, map[string]float64{"a": 2, `q"uo\te`: 1}) // a was evicted for the other, then loaded again
	evicted := 0.0
	for _, m := range fams["goray_serve_model_evictions_total"].GetMetric() {
		evicted += m.GetCounter().GetValue()
	}
	is.Equal(evicted, 2.0)
}
