package dashboard

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/goray-dev/goray/train"
)

// maxPoints bounds the metric history a TrainRun keeps; older points are
// dropped.
const maxPoints = 2000

// TrainRun records one training run for the dashboard. package train has
// no live status of its own, so a run is fed from the driver: pass
// [TrainRun.OnReport] as train.RunConfig.OnReport and [TrainRun.OnFailure]
// as train.RunConfig.OnFailure, and call [TrainRun.Finish] with what Fit
// returned. A TrainRun is safe for
// concurrent use.
type TrainRun struct {
	mu          sync.Mutex
	name        string
	started     time.Time
	reported    bool // a report has arrived
	attempt     int
	iteration   int
	slices      []string
	metrics     train.Metrics
	points      []Point
	checkpoints []int
	restarts    []Restart
	failures    []RunFailure
	profilers   []string
	done        bool
	err         string
}

// Point is one report's metrics.
type Point struct {
	Iteration int           `json:"iteration"`
	Attempt   int           `json:"attempt"`
	Time      time.Time     `json:"time"`
	Metrics   train.Metrics `json:"metrics"`
}

// Restart is an attempt seen starting after an earlier one.
type Restart struct {
	Attempt int `json:"attempt"`
	// Iteration is the attempt's first reported iteration.
	Iteration int       `json:"iteration"`
	Time      time.Time `json:"time"`
}

// RunFailure is one failed attempt, from train.Result.Failures.
type RunFailure struct {
	Attempt int       `json:"attempt"`
	Rank    int       `json:"rank"`
	Host    string    `json:"host"`
	Slice   string    `json:"slice"`
	Cause   string    `json:"cause"`
	Time    time.Time `json:"time"`
}

// RunStatus is a TrainRun as the dashboard shows it. Attempts count from
// 0, as package train numbers them.
type RunStatus struct {
	Name    string    `json:"name"`
	Started time.Time `json:"started"`
	// Attempt is the attempt of the last report.
	Attempt   int           `json:"attempt"`
	Iteration int           `json:"iteration"`
	Slices    []string      `json:"slices"`
	Metrics   train.Metrics `json:"metrics"`
	// Points are the reported metrics over time, oldest first.
	Points []Point `json:"points"`
	// Checkpoints are the iterations rank 0 reported a checkpoint at.
	Checkpoints []int        `json:"checkpoints"`
	Restarts    []Restart    `json:"restarts"`
	Failures    []RunFailure `json:"failures"`
	Done        bool         `json:"done"`
	Error       string       `json:"error,omitempty"`
	// Profilers are each rank's profiler address (host:port) when the run
	// gives its ranks one (train.RunConfig.ProfilerPort): what TensorBoard's
	// "Capture profile" asks for.
	Profilers []string `json:"profilers,omitempty"`
}

// NewTrainRun returns a run named name, started now.
func NewTrainRun(name string) *TrainRun {
	return &TrainRun{name: name, started: time.Now()}
}

// OnReport records one of rank 0's reports; its signature is
// train.RunConfig.OnReport's. A report of a later attempt than the last
// one records a restart.
func (r *TrainRun) OnReport(rep train.Report) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reported && rep.Attempt > r.attempt {
		r.restarts = append(r.restarts, Restart{Attempt: rep.Attempt, Iteration: rep.Iteration, Time: now})
	}
	r.reported, r.attempt, r.iteration = true, rep.Attempt, rep.Iteration
	r.slices = slices.Clone(rep.Slices)
	r.profilers = slices.Clone(rep.Profilers)
	r.metrics = maps.Clone(rep.Metrics)
	r.points = append(r.points, Point{Iteration: rep.Iteration, Attempt: rep.Attempt, Time: now, Metrics: r.metrics})
	if len(r.points) > maxPoints {
		r.points = slices.Delete(r.points, 0, len(r.points)-maxPoints)
	}
	if rep.Checkpoint {
		r.checkpoints = append(r.checkpoints, rep.Iteration)
	}
}

// OnFailure records a failed attempt as soon as the run knows of it; its
// signature is train.RunConfig.OnFailure's.
func (r *TrainRun) OnFailure(f train.Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, have := range r.failures {
		if have.Attempt == f.Attempt {
			return
		}
	}
	r.failures = append(r.failures, runFailure(f))
}

func runFailure(f train.Failure) RunFailure {
	return RunFailure{Attempt: f.Attempt, Rank: f.Rank, Host: f.Host, Slice: f.Slice, Cause: f.Cause, Time: f.Time}
}

// Finish records the end of the run: Fit's result (which may be nil) and
// error. The failures come from res.Failures.
func (r *TrainRun) Finish(res *train.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if err != nil {
		r.err = err.Error()
	}
	if res == nil {
		return
	}
	r.iteration = max(r.iteration, res.Iteration)
	r.failures = r.failures[:0]
	for _, f := range res.Failures {
		r.failures = append(r.failures, runFailure(f))
	}
}

// Status returns a copy of the run's state.
func (r *TrainRun) Status() RunStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RunStatus{
		Name: r.name, Started: r.started, Attempt: r.attempt, Iteration: r.iteration,
		Slices: slices.Clone(r.slices), Metrics: maps.Clone(r.metrics), Points: slices.Clone(r.points),
		Checkpoints: slices.Clone(r.checkpoints), Restarts: slices.Clone(r.restarts),
		Failures: slices.Clone(r.failures), Done: r.done, Error: r.err, Profilers: slices.Clone(r.profilers),
	}
}
