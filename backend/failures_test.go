package backend_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

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
			var r backend.FailureRing
			for i := range tt.adds {
				r.Add(backend.NewTaskFailure("task", i, "node", errors.New("boom")))
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
	var r backend.FailureRing
	for i := range backend.RecentFailures + 2 {
		r.Add(backend.NewTaskFailure("load", i, "node-1", backend.Errorf(backend.TaskFailed, "task load", "shard %d missing", i)))
	}
	failures := r.List()
	oldest, newest := failures[0], failures[len(failures)-1]
	fmt.Println(len(failures), oldest.Attempt, newest.Attempt)
	fmt.Println(newest.Code, newest.Node, newest.Message)
	// Output:
	// 100 2 101
	// TaskFailed node-1 task load: shard 101 missing
}
