package serve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// metrics are a server's metrics in the Prometheus text format, kept with
// github.com/VictoriaMetrics/metrics (a small, dependency-free library) in
// a set of their own so that two servers in one process do not collide.
// Counters and histograms are updated as requests pass; the gauges are
// read from the live state at scrape time.
type metrics struct {
	set    *vm.Set
	deps   sync.Map // deployment name → *depMetrics
	models sync.Map // modelKeyOf(deployment, model) → *modelMetrics
}

// modelMetrics are one model's counters on one multiplexed deployment.
// They are made when a model first loads, so that model IDs that never
// loaded (unknown ones a client made up) make no series.
type modelMetrics struct {
	requests, loads, evictions *vm.Counter
	loadSeconds                *vm.PrometheusHistogram
}

// depMetrics are one deployment's counters and histograms, made once.
type depMetrics struct {
	name            string
	set             *vm.Set
	byCode          sync.Map // HTTP status code → *vm.Counter
	latency         *vm.PrometheusHistogram
	retries         *vm.Counter
	replicaStarts   *vm.Counter
	replicaFailures *vm.Counter
	scaleUp         *vm.PrometheusHistogram
}

// The metric names, documented in docs/serve.md.
const (
	requestsTotal        = "goray_serve_requests_total"
	requestDuration      = "goray_serve_request_duration_seconds"
	retriesTotal         = "goray_serve_retries_total"
	replicaStartsTotal   = "goray_serve_replica_starts_total"
	replicaFailuresTotal = "goray_serve_replica_failures_total"
	scaleUpSeconds       = "goray_serve_scale_up_seconds"
	replicasGauge        = "goray_serve_replicas"
	targetGauge          = "goray_serve_target_replicas"
	slicesGauge          = "goray_serve_slices_held"
	chipsGauge           = "goray_serve_chips_held"
	queuedGauge          = "goray_serve_queued_requests"
	ongoingGauge         = "goray_serve_ongoing_requests"
	replicaOngoingGauge  = "goray_serve_replica_ongoing_requests"
	modelRequestsTotal   = "goray_serve_model_requests_total"
	modelLoadsTotal      = "goray_serve_model_loads_total"
	modelEvictionsTotal  = "goray_serve_model_evictions_total"
	modelLoadSeconds     = "goray_serve_model_load_seconds"
	modelLoadFailures    = "goray_serve_model_load_failures_total"
	modelsLoadedGauge    = "goray_serve_replica_models_loaded"
)

// family is a metric family's type and help text, written once before its
// series (the Prometheus text format allows one TYPE and one HELP line per
// family, before its samples, with all of them together).
type family struct{ typ, help string }

var families = map[string]family{
	requestsTotal:        {"counter", "Requests answered, by deployment and HTTP status code."},
	requestDuration:      {"histogram", "Time from a request's arrival to its answer, queueing included."},
	retriesTotal:         {"counter", "Requests retried on another replica after their replica was lost."},
	replicaStartsTotal:   {"counter", "Replicas that became ready."},
	replicaFailuresTotal: {"counter", "Replicas lost (host or actor died, health checks failed, connection refused)."},
	scaleUpSeconds:       {"histogram", "Time from a replica's creation to its first request."},
	replicasGauge:        {"gauge", "Replicas by state."},
	targetGauge:          {"gauge", "Replicas the autoscaler aims for."},
	slicesGauge:          {"gauge", "TPU slices the deployment's replicas hold."},
	chipsGauge:           {"gauge", "TPU chips the deployment's replicas of ChipsPerReplica hold (each on part of a host)."},
	queuedGauge:          {"gauge", "Requests waiting for a replica slot."},
	ongoingGauge:         {"gauge", "Requests in flight on the deployment's replicas."},
	replicaOngoingGauge:  {"gauge", "Requests in flight on one replica."},
	modelRequestsTotal:   {"counter", "Requests routed to a replica with their model loaded, by deployment and model (multiplexed deployments)."},
	modelLoadsTotal:      {"counter", "Models loaded on a replica, by deployment and model."},
	modelEvictionsTotal:  {"counter", "Models evicted (unloaded) from a replica to make room for another, by deployment and model."},
	modelLoadSeconds:     {"histogram", "Time one model load took, by deployment and model."},
	modelLoadFailures:    {"counter", "Model loads that failed, by deployment."},
	modelsLoadedGauge:    {"gauge", "Models loaded or loading on one replica."},
}

var (
	latencyBuckets = vm.ExponentialBuckets(0.0001, 2, 20)
	scaleUpBuckets = vm.ExponentialBuckets(0.001, 2, 20)
)

func newMetrics(s *Server) *metrics {
	m := &metrics{set: vm.NewSet()}
	m.set.RegisterMetricsWriter(func(w io.Writer) { writeStateGauges(w, s.Status()) })
	return m
}

// series names a time series: name{k1="v1",...}, labels in the order given
// (alphabetical, as Prometheus writes them).
func series(name string, labels ...string) string {
	b := []byte(name)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, labels[i]...)
		b = append(b, '=')
		b = appendLabelValue(b, labels[i+1])
	}
	if len(labels) > 0 {
		b = append(b, '}')
	}
	return string(b)
}

// appendLabelValue appends v quoted as the Prometheus text format quotes a
// label value: only backslash, double quote and line feed are escaped
// (Go's quoting would also escape tabs and non-printable runes in forms the
// format does not define).
func appendLabelValue(b []byte, v string) []byte {
	b = append(b, '"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '"':
			b = append(b, '\\', '"')
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func (m *metrics) dep(name string) *depMetrics {
	if d, ok := m.deps.Load(name); ok {
		return d.(*depMetrics)
	}
	d := &depMetrics{
		name:            name,
		set:             m.set,
		latency:         m.set.GetOrCreatePrometheusHistogramExt(series(requestDuration, "deployment", name), latencyBuckets),
		retries:         m.set.GetOrCreateCounter(series(retriesTotal, "deployment", name)),
		replicaStarts:   m.set.GetOrCreateCounter(series(replicaStartsTotal, "deployment", name)),
		replicaFailures: m.set.GetOrCreateCounter(series(replicaFailuresTotal, "deployment", name)),
		scaleUp:         m.set.GetOrCreatePrometheusHistogramExt(series(scaleUpSeconds, "deployment", name), scaleUpBuckets),
	}
	actual, _ := m.deps.LoadOrStore(name, d)
	return actual.(*depMetrics)
}

// loadFailed counts a failed model load on deployment name, without the
// model's ID: an ID a client made up fails to load, and must not make a
// series.
func (m *metrics) loadFailed(name string) {
	m.set.GetOrCreateCounter(series(modelLoadFailures, "deployment", name)).Inc()
}

// model returns the metrics of model on deployment name, made on first use.
func (m *metrics) model(name, model string) *modelMetrics {
	key := name + "\x00" + model
	if mm, ok := m.models.Load(key); ok {
		return mm.(*modelMetrics)
	}
	labels := []string{"deployment", name, "model", model}
	mm := &modelMetrics{
		requests:    m.set.GetOrCreateCounter(series(modelRequestsTotal, labels...)),
		loads:       m.set.GetOrCreateCounter(series(modelLoadsTotal, labels...)),
		evictions:   m.set.GetOrCreateCounter(series(modelEvictionsTotal, labels...)),
		loadSeconds: m.set.GetOrCreatePrometheusHistogramExt(series(modelLoadSeconds, labels...), latencyBuckets),
	}
	actual, _ := m.models.LoadOrStore(key, mm)
	return actual.(*modelMetrics)
}

func (d *depMetrics) requests(code int) *vm.Counter {
	if c, ok := d.byCode.Load(code); ok {
		return c.(*vm.Counter)
	}
	c := d.set.GetOrCreateCounter(series(requestsTotal, "code", strconv.Itoa(code), "deployment", d.name))
	actual, _ := d.byCode.LoadOrStore(code, c)
	return actual.(*vm.Counter)
}

// write writes every metric in the Prometheus text format, then the Go
// runtime's and the process's: each family's samples together, goray's
// preceded by one HELP and one TYPE line. The library's own comment
// lines are dropped, so the output is the same whether or not a program
// switched its process-wide metadata on (vm.ExposeMetadata).
func (m *metrics) write(w io.Writer) {
	var buf bytes.Buffer
	m.set.WritePrometheus(&buf)
	vm.WriteProcessMetrics(&buf)
	var order []string
	samples := map[string][]string{}
	for line := range strings.Lines(buf.String()) {
		if line == "\n" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue // not a sample
		}
		name := line[:end]
		fam := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && families[base].typ == "histogram" {
				fam = base
			}
		}
		if _, seen := samples[fam]; !seen {
			order = append(order, fam)
		}
		samples[fam] = append(samples[fam], line)
	}
	bw := bufio.NewWriter(w)
	for _, fam := range order {
		if f, ok := families[fam]; ok {
			fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", fam, f.help, fam, f.typ)
		}
		for _, line := range samples[fam] {
			bw.WriteString(line)
		}
	}
	bw.Flush()
}

// writeStateGauges writes the gauges read from the live state, family by
// family.
func writeStateGauges(w io.Writer, st Status) {
	for _, d := range st.Deployments {
		for _, r := range d.Replicas {
			vm.WriteGaugeUint64(w, series(replicaOngoingGauge, "deployment", d.Name, "replica", r.ID), uint64(max(r.Ongoing, 0)))
		}
	}
	for _, d := range st.Deployments {
		for _, r := range d.Replicas {
			if r.Models != nil {
				vm.WriteGaugeUint64(w, series(modelsLoadedGauge, "deployment", d.Name, "replica", r.ID), uint64(len(r.Models)))
			}
		}
	}
	for _, d := range st.Deployments {
		byState := map[string]int{}
		for _, r := range d.Replicas {
			byState[r.State]++
		}
		for _, name := range replicaStateNames {
			vm.WriteGaugeUint64(w, series(replicasGauge, "deployment", d.Name, "state", name), uint64(byState[name]))
		}
	}
	gauge := func(name string, value func(DeploymentStatus) int) {
		for _, d := range st.Deployments {
			vm.WriteGaugeUint64(w, series(name, "deployment", d.Name), uint64(max(value(d), 0)))
		}
	}
	gauge(targetGauge, func(d DeploymentStatus) int { return d.Target })
	gauge(slicesGauge, func(d DeploymentStatus) int { return d.SlicesHeld })
	gauge(chipsGauge, func(d DeploymentStatus) int { return d.ChipsHeld })
	gauge(queuedGauge, func(d DeploymentStatus) int { return d.Queued })
	gauge(ongoingGauge, func(d DeploymentStatus) int {
		n := 0
		for _, r := range d.Replicas {
			n += max(r.Ongoing, 0)
		}
		return n
	})
}

// WriteMetrics writes the server's metrics in the Prometheus text
// exposition format, as GET /-/metrics serves them: for a program that
// serves its own metrics endpoint, or for tests.
func (s *Server) WriteMetrics(w io.Writer) { s.metrics.write(w) }

// observe records one answered request.
func (d *deployment) observe(code int, start time.Time) {
	now := time.Now()
	el := now.Sub(start)
	m := d.s.metrics.dep(d.spec.Name)
	m.requests(code).Inc()
	m.latency.Update(el.Seconds())
	d.window.add(now, el)
}
