package backend

import "time"

// Counters are a backend's cumulative counts since it started, for
// metrics: they only grow. [State.Counters] carries them; a backend that
// keeps none leaves it nil.
type Counters struct {
	// Work counts tasks and actor calls per name, by name: a task's
	// registered name (TaskSpec.Name, not its display name), an actor
	// call's "Class.Method". Past [MaxCountedNames] names, the others
	// count together under [OtherWorkName].
	Work []WorkCount
	// WorkerRestarts counts the workers the runner restarted (a worker
	// process or pod that died and was started again on its node).
	WorkerRestarts uint64
	// SliceReservationWait is how long the granted TPU slice reservations
	// waited, from request to grant (claim included), in seconds.
	SliceReservationWait Histogram
}

// WorkCount counts the tasks or actor calls of one name.
type WorkCount struct {
	Name string
	// Submitted counts the submissions that returned an ObjectID.
	Submitted uint64
	// Finished counts those whose result is a value; Failed those whose
	// result is an error (retries spent, cancelled, or the cluster
	// closed). Submitted minus both is the work still in flight.
	Finished, Failed uint64
}

// MaxCountedNames bounds the names [Counters.Work] tracks, as task names
// need not be registered.
const MaxCountedNames = 1000

// OtherWorkName is the name work is counted under once
// [MaxCountedNames] names are tracked.
const OtherWorkName = "<other>"

// Histogram counts observations in buckets.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending; Counts[i] counts
	// the observations in (Bounds[i-1], Bounds[i]], and Counts has one
	// more entry, for those above the last bound.
	Bounds []float64
	Counts []uint64
	// Sum is the sum of the observations, Count how many there were.
	Sum   float64
	Count uint64
}

// WaitBuckets are the bounds, in seconds, of [Counters.SliceReservationWait]:
// from 10ms (a free slice) to an hour (a queue behind long runs).
var WaitBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// NewHistogram returns an empty histogram with the given bounds.
func NewHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

// ObserveDuration adds d, in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Observe adds one observation.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.Bounds) && v > h.Bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Sum += v
	h.Count++
}

// Clone returns a copy that shares nothing with h.
func (h Histogram) Clone() Histogram {
	h.Bounds = append([]float64(nil), h.Bounds...)
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}
