package dashboard_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

// WriteStatus summarises a view as ray status does: nodes and resources,
// slices by shape and state, reservations, requests waiting and for how
// long, tasks with their counts, actors, groups, failures and problems.
func TestWriteStatus(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2", Name: "trainer"})
	is.NoErr(err)
	defer spg.Release(ctx)
	v := d.View(ctx)
	v.Pending = append(v.Pending, backend.PendingSliceRequest{Name: "second", Generation: "v5p", Topology: "2x2x2", ChipsPerHost: 4, NumSlices: 1, Since: v.Time.Add(-90 * time.Second)})
	v.Work.Tasks = []dashboard.TaskCount{{Name: "step", Running: 2, Queued: 1}}
	v.Counters = &backend.Counters{Work: []backend.WorkCount{{Name: "step", Submitted: 10, Finished: 6, Failed: 1}, {Name: "load", Submitted: 4, Finished: 4}}, WorkerRestarts: 3}
	v.Work.Failures = []dashboard.Failure{{Task: "step", Attempt: 1, Code: "TaskFailed", Message: "boom\nstack...", Node: "cpu", Time: v.Time}}
	v.Problems = []string{"pending slice requests: gone"}
	var buf bytes.Buffer
	is.NoErr(dashboard.WriteStatus(&buf, v))
	out := buf.String()
	for _, want := range []string{
		"goray status at ",
		"Nodes: 27 alive, 0 dead", // a CPU node, 2 × 4 v6e 4x4 hosts, 2 v5p 2x2x2 hosts, 16 v6e 8x8 hosts
		"  TPU                       8/104 used",
		"v5p 2x2x2 (4 chips per host)  1 slice: 0 free, 0 busy, 1 reserved, 0 partial, 0 broken",
		"v6e 4x4 (4 chips per host)    2 slices: 2 free, 0 busy, 0 reserved, 0 partial, 0 broken",
		" trainer ",
		"second  1 × v5p 2x2x2  for 1m30s",
		"TASK  RUNNING  QUEUED  SUBMITTED  FINISHED  FAILED",
		"step  2        1       10         6         1",
		"load  0        0       4          4         0",
		"worker restarts: 3",
		"step attempt 1 on cpu: TaskFailed: boom\n",
		"Problems\n  pending slice requests: gone",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
