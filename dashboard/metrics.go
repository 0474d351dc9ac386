package dashboard

import (
	"bufio"
	"context"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The runtime's metrics in the Prometheus text exposition format (version
// 0.0.4), written from a [View]: what the page shows is what is scraped.
// Counters come from the backend's cumulative counts
// (backend.State.Counters); gauges from the view at scrape time. The
// names, and the Ray metrics they stand for, are listed in
// docs/dashboard.md.
//
// The text is written here rather than through a metrics library: every
// value is read at scrape time, so there is nothing for a library to keep,
// and github.com/VictoriaMetrics/metrics (which serve uses) would add its
// process-wide metadata switch, which serve has to undo.

// The metric families, in the order they are written.
var metricFamilies = []struct{ name, typ, help string }{
	{"goray_tasks_submitted_total", "counter", "Tasks and actor calls submitted, by name (an actor call's Class.Method)."},
	{"goray_tasks_finished_total", "counter", "Tasks and actor calls whose result is a value, by name."},
	{"goray_tasks_failed_total", "counter", "Tasks and actor calls whose result is an error (retries spent, cancelled, or the cluster closed), by name."},
	{"goray_tasks", "gauge", "Tasks queued for resources and running now, by name and state."},
	{"goray_work_queued", "gauge", "Tasks, actor calls and actors waiting for resources or for their input."},
	{"goray_work_running", "gauge", "Tasks running now."},
	{"goray_actors", "gauge", "Actors by class and state (PENDING, ALIVE, RESTARTING, DEAD)."},
	{"goray_placement_groups", "gauge", "Placement groups (slice reservations included) by state."},
	{"goray_nodes", "gauge", "Nodes by state (alive, dead)."},
	{"goray_resources", "gauge", "Logical resources of the alive nodes, by resource and state (used, available)."},
	{"goray_tpu_slices", "gauge", "TPU slices by shape and state (free, busy, reserved, partial: sub-slices reserved, broken: a host dead)."},
	{"goray_slice_reservations_waiting", "gauge", "TPU slice reservations waiting for slices, by shape."},
	{"goray_slice_reservation_oldest_wait_seconds", "gauge", "How long the oldest waiting TPU slice reservation of a shape has waited."},
	{"goray_slice_reservation_wait_seconds", "histogram", "How long granted TPU slice reservations waited, from request to grant."},
	{"goray_tpu_chip_duty_cycle_percent", "gauge", "Percent of time a TPU chip was actively processing, as its node reports it (GKE TPU device plugin: duty_cycle_node)."},
	{"goray_tpu_chip_tensorcore_utilization_percent", "gauge", "A TPU chip's tensor-core utilisation (GKE TPU device plugin: tensorcore_utilization_node)."},
	{"goray_tpu_chip_hbm_used_bytes", "gauge", "A TPU chip's HBM in use (GKE TPU device plugin: memory_used_node)."},
	{"goray_tpu_chip_hbm_total_bytes", "gauge", "A TPU chip's HBM in all (GKE TPU device plugin: memory_total_node)."},
	{"goray_worker_restarts_total", "counter", "Workers (processes or pods) the runner restarted after they died."},
	{"goray_view_problems", "gauge", "Parts of the cluster's state that could not be read for this scrape."},
}

// sample is one line of a family: its labels (name, value pairs) and its
// value.
type sample struct {
	labels []string
	value  float64
}

// WriteMetrics writes the runtime's metrics of view v in the Prometheus
// text exposition format: one HELP and one TYPE line per family, then its
// samples, families in a fixed order and samples sorted by labels.
func WriteMetrics(w io.Writer, v *View) error {
	fams := viewMetrics(v)
	bw := bufio.NewWriter(w)
	var line []byte
	for _, f := range metricFamilies {
		samples := fams[f.name]
		if len(samples) == 0 && f.typ != "histogram" {
			continue
		}
		bw.WriteString("# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.typ + "\n")
		if f.typ == "histogram" {
			writeHistogram(bw, f.name, v)
			continue
		}
		slices.SortFunc(samples, func(a, b sample) int { return slices.Compare(a.labels, b.labels) })
		for _, s := range samples {
			line = appendSample(line[:0], f.name, s.labels, s.value)
			bw.Write(line)
		}
	}
	return bw.Flush()
}

// WriteMetrics writes the cluster's metrics now, as GET /metrics serves
// them.
func (d *Dashboard) WriteMetrics(ctx context.Context, w io.Writer) error {
	return WriteMetrics(w, d.buildView(ctx))
}

func (d *Dashboard) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := d.WriteMetrics(r.Context(), w); err != nil {
		d.log.Debug("dashboard: write metrics", "err", err)
	}
}

// viewMetrics computes every family's samples but the histogram's.
func viewMetrics(v *View) map[string][]sample {
	m := map[string][]sample{}
	add := func(name string, value float64, labels ...string) {
		m[name] = append(m[name], sample{labels: labels, value: value})
	}
	if c := v.Counters; c != nil {
		for _, wc := range c.Work {
			add("goray_tasks_submitted_total", float64(wc.Submitted), "name", wc.Name)
			add("goray_tasks_finished_total", float64(wc.Finished), "name", wc.Name)
			add("goray_tasks_failed_total", float64(wc.Failed), "name", wc.Name)
		}
		add("goray_worker_restarts_total", float64(c.WorkerRestarts))
	}
	for _, t := range v.Work.Tasks {
		add("goray_tasks", float64(t.Queued), "name", t.Name, "state", "queued")
		add("goray_tasks", float64(t.Running), "name", t.Name, "state", "running")
	}
	if v.Counters != nil || len(v.Nodes) > 0 {
		add("goray_work_queued", float64(v.Work.Queued))
		add("goray_work_running", float64(v.Work.Running))
	}
	type classState struct{ class, state string }
	actors := map[classState]int{}
	for _, a := range v.Work.Actors {
		actors[classState{a.Class, a.State}]++
	}
	for k, n := range actors {
		add("goray_actors", float64(n), "class", k.class, "state", k.state)
	}
	pgs := map[string]int{}
	for _, g := range v.Work.PlacementGroups {
		pgs[g.State]++
	}
	for state, n := range pgs {
		add("goray_placement_groups", float64(n), "state", state)
	}
	for _, sh := range v.Shapes {
		states := map[string]int{StateFree: 0, StateBusy: 0, StateReserved: 0, StatePartial: 0, StateBroken: 0}
		for _, s := range sh.Slices {
			states[s.State]++
		}
		for state, n := range states {
			add("goray_tpu_slices", float64(n), append(shapeLabels(sh.Generation, sh.Topology, sh.ChipsPerHost), "state", state)...)
		}
	}
	if len(v.Nodes) > 0 {
		alive := 0
		for _, n := range v.Nodes {
			if n.Alive {
				alive++
			}
		}
		add("goray_nodes", float64(alive), "state", "alive")
		add("goray_nodes", float64(len(v.Nodes)-alive), "state", "dead")
		used, total := resourceTotals(v)
		for _, k := range slices.Sorted(maps.Keys(total)) {
			add("goray_resources", used[k], "resource", k, "state", "used")
			add("goray_resources", total[k]-used[k], "resource", k, "state", "available")
		}
	}
	type shapeKey struct {
		gen, topo string
		chips     int
	}
	waiting, oldest := map[shapeKey]int{}, map[shapeKey]time.Duration{}
	for _, p := range v.Pending {
		k := shapeKey{p.Generation, p.Topology, p.ChipsPerHost}
		waiting[k]++
		oldest[k] = max(oldest[k], v.Time.Sub(p.Since))
	}
	for k, n := range waiting {
		l := shapeLabels(k.gen, k.topo, k.chips)
		add("goray_slice_reservations_waiting", float64(n), l...)
		add("goray_slice_reservation_oldest_wait_seconds", max(oldest[k].Seconds(), 0), l...)
	}
	for _, sh := range v.Shapes {
		for _, s := range sh.Slices {
			for _, c := range s.Chips {
				if c.Metrics == nil || c.Worker < 0 || c.Worker >= len(s.Hosts) {
					continue
				}
				l := []string{"device", strconv.Itoa(c.Metrics.Device), "node", s.Hosts[c.Worker].Node, "slice", s.Name}
				for name, val := range map[string]float64{
					"goray_tpu_chip_duty_cycle_percent":             c.Metrics.DutyCycle,
					"goray_tpu_chip_tensorcore_utilization_percent": c.Metrics.TensorCoreUtilization,
					"goray_tpu_chip_hbm_used_bytes":                 c.Metrics.HBMUsed,
					"goray_tpu_chip_hbm_total_bytes":                c.Metrics.HBMTotal,
				} {
					if val >= 0 { // -1: not reported
						add(name, val, l...)
					}
				}
			}
		}
	}
	add("goray_view_problems", float64(len(v.Problems)))
	return m
}

func shapeLabels(gen, topo string, chips int) []string {
	return []string{"chips_per_host", strconv.Itoa(chips), "generation", gen, "topology", topo}
}

// writeHistogram writes the slice reservation wait histogram: cumulative
// buckets, then the sum and the count. Without counters it is empty.
func writeHistogram(bw *bufio.Writer, name string, v *View) {
	var bounds []float64
	var counts []uint64
	var sum float64
	var count uint64
	if v.Counters != nil {
		h := v.Counters.SliceReservationWait
		bounds, counts, sum, count = h.Bounds, h.Counts, h.Sum, h.Count
	}
	var cum uint64
	var line []byte
	for i, b := range bounds {
		if i < len(counts) {
			cum += counts[i]
		}
		line = appendSample(line[:0], name+"_bucket", []string{"le", formatFloat(b)}, float64(cum))
		bw.Write(line)
	}
	line = appendSample(line[:0], name+"_bucket", []string{"le", "+Inf"}, float64(count))
	bw.Write(line)
	bw.Write(appendSample(line[:0], name+"_sum", nil, sum))
	bw.Write(appendSample(line[:0], name+"_count", nil, float64(count)))
}

// appendSample appends `name{k="v",...} value\n`, label values escaped as
// the text format wants (backslash, double quote and newline).
func appendSample(b []byte, name string, labels []string, value float64) []byte {
	b = append(b, name...)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, labels[i]...)
		b = append(b, '=', '"')
		b = append(b, labelEscaper.Replace(labels[i+1])...)
		b = append(b, '"')
	}
	if len(labels) > 0 {
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = append(b, formatFloat(value)...)
	return append(b, '\n')
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case f == math.Trunc(f) && math.Abs(f) < 1e15:
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
