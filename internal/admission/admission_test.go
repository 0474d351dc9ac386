package admission_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code backend.Code
		msg  string
	}{
		{"bundle index", admission.CheckBundleIndex("submit task sq", 4, 2, 2), backend.InvalidArgument, "submit task sq: bundle index 2 out of range: pg-4 has 2 bundles (use -1 for any)"},
		{"any bundle", admission.CheckBundleIndex("submit task sq", 4, -1, 2), backend.OK, ""},
		{"misfit", admission.BundleMisfit("submit task sq", backend.Resources{backend.CPU: 2}, -1, 4), backend.Infeasible, "submit task sq: {CPU: 2} does not fit in bundle (any) of pg-4"},
		{"not found", admission.PlacementGroupNotFound("remove placement group", 4), backend.NotFound, "remove placement group: placement group pg-4 does not exist"},
		{"removed", admission.PlacementGroupRemovedError(4), backend.FailedPrecondition, "placement group pg-4: placement group removed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			is.Equal(backend.CodeOf(tc.err), tc.code)
			if tc.code == backend.OK {
				return
			}
			is.Equal(tc.err.Error(), tc.msg)
		})
	}
	t.Run("removed matches its sentinel", func(t *testing.T) {
		is := is.New(t)
		is.True(errors.Is(admission.PlacementGroupRemovedError(1), backend.ErrPlacementGroupRemoved))
	})
}

func TestOverlayEnv(t *testing.T) {
	is := is.New(t)
	base := map[string]string{"A": "1", "B": "2"}
	is.Equal(admission.OverlayEnv(base, nil)["A"], "1")
	got := admission.OverlayEnv(base, map[string]string{"B": "3", "C": "4"})
	is.Equal(got, map[string]string{"A": "1", "B": "3", "C": "4"})
	is.Equal(base["B"], "2") // base is not modified
	is.Equal(admission.OverlayEnv(nil, map[string]string{"C": "4"}), map[string]string{"C": "4"})
}

func TestFailureRing(t *testing.T) {
	tests := []struct {
		name  string
		adds  int
		first int // attempt of the oldest listed
	}{
		{"empty", 0, 0},
		{"one", 1, 0},
		{"full", backend.RecentFailures, 0},
		{"one over", backend.RecentFailures + 1, 1},
		{"wrapped twice and more", 2*backend.RecentFailures + 7, backend.RecentFailures + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var r admission.FailureRing
			for i := range tt.adds {
				r.Add(admission.NewTaskFailure("task", i, "node", errors.New("boom")))
			}
			got := r.List()
			is.Equal(len(got), min(tt.adds, backend.RecentFailures))
			for i, f := range got {
				is.Equal(f.Attempt, tt.first+i) // oldest first, in order
			}
			if len(got) > 0 {
				got[0].Task = "changed"
				is.Equal(r.List()[0].Task, "task") // List returns a copy
			}
		})
	}
}

func ExampleFailureRing() {
	var r admission.FailureRing
	for i := range backend.RecentFailures + 2 {
		r.Add(admission.NewTaskFailure("load", i, "node-1", backend.Errorf(backend.TaskFailed, "task load", "shard %d missing", i)))
	}
	failures := r.List()
	oldest, newest := failures[0], failures[len(failures)-1]
	fmt.Println(len(failures), oldest.Attempt, newest.Attempt)
	fmt.Println(newest.Code, newest.Node, newest.Message)
	// Output:
	// 100 2 101
	// TaskFailed node-1 task load: shard 101 missing
}
