package dashboard_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/dashboard"
)

// WriteMetrics writes a view as the text format wants it: one HELP and
// TYPE per family before its samples, label values escaped, histogram
// buckets cumulative ending with +Inf equal to the count, waiting
// reservations per shape with the oldest's age. (serve/promtest parses a
// live program's metrics with the Prometheus parser.)
func TestWriteMetrics(t *testing.T) {
	is := is.New(t)
	now := time.Unix(1000, 0)
	h := backend.NewHistogram([]float64{1, 10})
	h.Observe(0.5)
	h.Observe(5)
	h.Observe(50)
	v := &dashboard.View{
		Time:  now,
		Nodes: []dashboard.Node{{Name: "a", Alive: true, Capacity: backend.Resources{"CPU": 4}, Free: backend.Resources{"CPU": 1}}, {Name: "b"}},
		Pending: []backend.PendingSliceRequest{
			{Name: "x", Generation: "v6e", Topology: "4x4", ChipsPerHost: 4, NumSlices: 1, Since: now.Add(-3 * time.Second)},
			{Name: "y", Generation: "v6e", Topology: "4x4", ChipsPerHost: 4, NumSlices: 2, Since: now.Add(-7 * time.Second)},
		},
		Work: dashboard.Work{Queued: 2, Running: 3, Tasks: []dashboard.TaskCount{{Name: `a"b\c` + "\n", Queued: 2, Running: 3}}},
		Counters: &backend.Counters{
			Work:                 []backend.WorkCount{{Name: "t", Submitted: 5, Finished: 3, Failed: 1}},
			WorkerRestarts:       2,
			SliceReservationWait: h,
		},
	}
	var buf bytes.Buffer
	is.NoErr(dashboard.WriteMetrics(&buf, v))
	out := buf.String()
	for _, want := range []string{
		"# HELP goray_tasks_submitted_total ",
		"# TYPE goray_tasks_submitted_total counter\ngoray_tasks_submitted_total{name=\"t\"} 5\n",
		"goray_tasks_finished_total{name=\"t\"} 3\n",
		"goray_tasks_failed_total{name=\"t\"} 1\n",
		`goray_tasks{name="a\"b\\c\n",state="queued"} 2` + "\n",
		`goray_tasks{name="a\"b\\c\n",state="running"} 3` + "\n",
		"goray_nodes{state=\"alive\"} 1\ngoray_nodes{state=\"dead\"} 1\n",
		"goray_resources{resource=\"CPU\",state=\"available\"} 1\ngoray_resources{resource=\"CPU\",state=\"used\"} 3\n",
		`goray_slice_reservations_waiting{chips_per_host="4",generation="v6e",topology="4x4"} 2` + "\n",
		`goray_slice_reservation_oldest_wait_seconds{chips_per_host="4",generation="v6e",topology="4x4"} 7` + "\n",
		"# TYPE goray_slice_reservation_wait_seconds histogram\n" +
			"goray_slice_reservation_wait_seconds_bucket{le=\"1\"} 1\n" +
			"goray_slice_reservation_wait_seconds_bucket{le=\"10\"} 2\n" +
			"goray_slice_reservation_wait_seconds_bucket{le=\"+Inf\"} 3\n" +
			"goray_slice_reservation_wait_seconds_sum 55.5\n" +
			"goray_slice_reservation_wait_seconds_count 3\n",
		"goray_worker_restarts_total 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			name := strings.Fields(line)[2]
			is.Equal(strings.Count(out, "# TYPE "+name+" "), 1) // one TYPE per family
		}
	}
}
