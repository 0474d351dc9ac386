package serve

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are a server's Prometheus metrics, in a registry of its own so
// that two servers in one process do not collide.
type metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	replicaFailures *prometheus.CounterVec
	scaleUp         *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "goray", Subsystem: "serve", Name: "requests_total",
			Help: "Requests answered, by deployment and HTTP status code.",
		}, []string{"deployment", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "goray", Subsystem: "serve", Name: "request_duration_seconds",
			Help:    "Request latency through the router, queueing included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
		}, []string{"deployment"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "goray", Subsystem: "serve", Name: "retries_total",
			Help: "Idempotent requests retried on another replica after theirs was lost.",
		}, []string{"deployment"}),
		replicaFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "goray", Subsystem: "serve", Name: "replica_failures_total",
			Help: "Replicas lost to a dead host, a dead actor or failed health checks.",
		}, []string{"deployment"}),
		scaleUp: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "goray", Subsystem: "serve", Name: "scale_up_seconds",
			Help:    "Time from the decision to add a replica to its first request.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20),
		}, []string{"deployment"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.retries, m.replicaFailures, m.scaleUp,
		stateCollector{s}, collectors.NewGoCollector())
	return m
}

var (
	replicasDesc = prometheus.NewDesc("goray_serve_replicas", "Replicas by state.", []string{"deployment", "state"}, nil)
	targetDesc   = prometheus.NewDesc("goray_serve_target_replicas", "Replicas the deployment aims for.", []string{"deployment"}, nil)
	slicesDesc   = prometheus.NewDesc("goray_serve_slices_held", "TPU slices held by the deployment's replicas.", []string{"deployment"}, nil)
	queuedDesc   = prometheus.NewDesc("goray_serve_queued_requests", "Requests waiting in the router for a free replica.", []string{"deployment"}, nil)
	ongoingDesc  = prometheus.NewDesc("goray_serve_replica_ongoing_requests", "Requests routed to a replica and not done.", []string{"deployment", "replica"}, nil)
)

// stateCollector reads the gauges from the live state at scrape time.
type stateCollector struct{ s *Server }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{replicasDesc, targetDesc, slicesDesc, queuedDesc, ongoingDesc} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.s.Status().Deployments {
		byState := map[string]int{}
		for _, name := range replicaStateNames {
			byState[name] = 0
		}
		for _, r := range d.Replicas {
			byState[r.State]++
			ch <- prometheus.MustNewConstMetric(ongoingDesc, prometheus.GaugeValue, float64(r.Ongoing), d.Name, r.ID)
		}
		for st, n := range byState {
			ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(n), d.Name, st)
		}
		ch <- prometheus.MustNewConstMetric(targetDesc, prometheus.GaugeValue, float64(d.Target), d.Name)
		ch <- prometheus.MustNewConstMetric(slicesDesc, prometheus.GaugeValue, float64(d.SlicesHeld), d.Name)
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(d.Queued), d.Name)
	}
}

// observe records one answered request.
func (d *deployment) observe(code int, start time.Time) {
	now := time.Now()
	el := now.Sub(start)
	d.s.metrics.requests.WithLabelValues(d.spec.Name, codeLabel(code)).Inc()
	d.s.metrics.latency.WithLabelValues(d.spec.Name).Observe(el.Seconds())
	d.window.add(now, el)
}

func codeLabel(code int) string { return strconv.Itoa(code) }
