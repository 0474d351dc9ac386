package cluster

import (
	"testing"

	"github.com/goray-dev/goray/backend"
)

// BenchmarkCounterHooks is what the counters add to one task: its
// submission and its completion counted, names alternating in runs as a
// program's do. Compare with BenchmarkSingleClientTasksAsync (ray).
func BenchmarkCounterHooks(b *testing.B) {
	var c counters
	specs := []*backend.TaskSpec{{Name: "examples.square"}, {Name: "examples.cube"}}
	tasks := []*task{{spec: specs[0]}, {spec: specs[1]}}
	objs := []*object{{task: tasks[0]}, {task: tasks[1]}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := (i / 64) % 2 // runs of 64 of one name
		c.submitted(workKey{name: specs[k].Name})
		c.objectDone(objs[k], nil)
	}
}

// BenchmarkCounterHooksBaseline is two atomic adds, the floor of any
// counting, measured in the same run as BenchmarkCounterHooks.
func BenchmarkCounterHooksBaseline(b *testing.B) {
	var w workCount
	for b.Loop() {
		w.submitted.Add(1)
		w.finished.Add(1)
	}
}
