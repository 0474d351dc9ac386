package cluster

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// The runtime's counters (backend.State.Counters), for metrics. The task
// path pays one cached lookup and one atomic add when work is submitted
// and when it completes: the name's counts are found through a one-entry
// cache (submissions and completions come in runs of one name), and the
// map behind it is read only on a change of name.

// workKey names counted work: a task's name, or an actor call's class and
// method (joined only when the counters are read).
type workKey struct{ name, method string }

// workCount is the counts of one name.
type workCount struct {
	submitted, finished, failed atomic.Uint64
}

// counters are the runtime's; the map and the caches are guarded by b.mu,
// the counts are atomic.
type counters struct {
	byKey            map[workKey]*workCount
	lastSub, lastEnd workKey
	subC, endC       *workCount

	workerRestarts atomic.Uint64
	sliceWait      backend.Histogram // guarded by b.mu
}

// of returns the counts of k, made if need be. b.mu must be held.
func (c *counters) of(k workKey) *workCount {
	w := c.byKey[k]
	if w != nil {
		return w
	}
	if c.byKey == nil {
		c.byKey = map[workKey]*workCount{}
	}
	if len(c.byKey) >= backend.MaxCountedNames {
		k = workKey{name: backend.OtherWorkName}
		if w = c.byKey[k]; w != nil {
			return w
		}
	}
	w = new(workCount)
	c.byKey[k] = w
	return w
}

// submitted counts work of k submitted. b.mu must be held.
func (c *counters) submitted(k workKey) {
	if c.subC != nil && k.name == c.lastSub.name && k.method == c.lastSub.method {
		c.subC.submitted.Add(1) // the cached name: inlined
		return
	}
	c.lastSub, c.subC = k, c.of(k)
	c.subC.submitted.Add(1)
}

// objectDone counts the completion of o if it is a task's or a call's
// result, failed if err is set. b.mu must be held.
func (c *counters) objectDone(o *object, err error) {
	var k workKey
	switch {
	case o.task != nil:
		k.name = o.task.spec.Name
	case o.call != nil:
		k.name, k.method = o.call.spec.Class, o.call.spec.Method
	default:
		return
	}
	w := c.endC
	if w == nil || k.name != c.lastEnd.name || k.method != c.lastEnd.method {
		c.lastEnd, c.endC = k, c.of(k)
		w = c.endC
	}
	if err != nil {
		w.failed.Add(1)
	} else {
		w.finished.Add(1)
	}
}

// sliceGranted records how long a granted slice request waited. b.mu
// must be held.
func (c *counters) sliceGranted(w *sliceWait) {
	if c.sliceWait.Counts == nil {
		c.sliceWait = backend.NewHistogram(backend.WaitBuckets)
	}
	c.sliceWait.ObserveDuration(time.Since(w.since))
}

// snapshot copies the counters. b.mu must be held.
func (c *counters) snapshot() *backend.Counters {
	out := &backend.Counters{WorkerRestarts: c.workerRestarts.Load(), SliceReservationWait: c.sliceWait.Clone()}
	if out.SliceReservationWait.Counts == nil {
		out.SliceReservationWait = backend.NewHistogram(backend.WaitBuckets)
	}
	for k, w := range c.byKey {
		name := k.name
		if k.method != "" {
			name += "." + k.method
		}
		out.Work = append(out.Work, backend.WorkCount{Name: name, Submitted: w.submitted.Load(), Finished: w.finished.Load(), Failed: w.failed.Load()})
	}
	slices.SortFunc(out.Work, func(a, b backend.WorkCount) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
