package dashboard_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/train"
)

func TestTrainRun(t *testing.T) {
	reports := []train.Report{
		{Attempt: 0, Iteration: 1, Metrics: train.Metrics{"loss": 2}, Slices: []string{"s0"}},
		{Attempt: 0, Iteration: 2, Metrics: train.Metrics{"loss": 1.5}, Slices: []string{"s0"}, Checkpoint: true},
		{Attempt: 1, Iteration: 3, Metrics: train.Metrics{"loss": 1.2}, Slices: []string{"s1"}},
		{Attempt: 1, Iteration: 4, Metrics: train.Metrics{"loss": 1}, Slices: []string{"s1"}, Checkpoint: true},
	}
	failedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	res := &train.Result{Iteration: 4, Attempts: 2, Failures: []train.Failure{
		{Attempt: 0, Rank: 3, Host: "h3", Slice: "s0", Cause: "host died", Time: failedAt},
	}}
	tests := []struct {
		name    string
		reports int
		finish  bool
		err     error
		check   func(*is.I, dashboard.RunStatus)
	}{
		{"before any report", 0, false, nil, func(is *is.I, s dashboard.RunStatus) {
			is.Equal(s.Name, "run")
			is.Equal(s.Iteration, 0)
			is.Equal(s.Done, false)
		}},
		{"first attempt", 2, false, nil, func(is *is.I, s dashboard.RunStatus) {
			is.Equal(s.Attempt, 0)
			is.Equal(s.Iteration, 2)
			is.Equal(s.Metrics, train.Metrics{"loss": 1.5})
			is.Equal(len(s.Points), 2)
			is.Equal(s.Checkpoints, []int{2})
			is.Equal(len(s.Restarts), 0)
		}},
		{"a restart", 3, false, nil, func(is *is.I, s dashboard.RunStatus) {
			is.Equal(s.Attempt, 1)
			is.Equal(s.Slices, []string{"s1"})
			is.Equal(len(s.Restarts), 1)
			is.Equal(s.Restarts[0].Attempt, 1)
			is.Equal(s.Restarts[0].Iteration, 3)
		}},
		{"finished", 4, true, nil, func(is *is.I, s dashboard.RunStatus) {
			is.True(s.Done)
			is.Equal(s.Error, "")
			is.Equal(s.Checkpoints, []int{2, 4})
			is.Equal(s.Failures, []dashboard.RunFailure{{Attempt: 0, Rank: 3, Host: "h3", Slice: "s0", Cause: "host died", Time: failedAt}})
		}},
		{"failed", 4, true, errors.New("out of restarts"), func(is *is.I, s dashboard.RunStatus) {
			is.True(s.Done)
			is.Equal(s.Error, "out of restarts")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			r := dashboard.NewTrainRun("run")
			for _, rep := range reports[:tt.reports] {
				r.OnReport(rep)
			}
			if tt.finish {
				r.Finish(res, tt.err)
			}
			tt.check(is, r.Status())
		})
	}
}

func TestTrainRunKeepsRecentPoints(t *testing.T) {
	is := is.New(t)
	r := dashboard.NewTrainRun("long")
	for i := range 2500 {
		r.OnReport(train.Report{Attempt: 1, Iteration: i + 1, Metrics: train.Metrics{"loss": 1}})
	}
	s := r.Status()
	is.Equal(len(s.Points), 2000)
	is.Equal(s.Points[0].Iteration, 501)
	is.Equal(s.Points[1999].Iteration, 2500)
}

func TestTrackRun(t *testing.T) {
	is := is.New(t)
	d, err := dashboard.New(cluster(t), nil)
	is.NoErr(err)
	r := dashboard.NewTrainRun("tracked")
	r.OnReport(train.Report{Attempt: 1, Iteration: 7, Metrics: train.Metrics{"loss": 0.5}})
	d.TrackRun(r)
	v := d.View(t.Context())
	is.Equal(len(v.Train), 1)
	is.Equal(v.Train[0].Name, "tracked")
	is.Equal(v.Train[0].Iteration, 7)
}

// A run whose ranks have profiler ports (train.RunConfig.ProfilerPort)
// shows each rank's address, in the view and in goray status.
func TestTrainRunProfilers(t *testing.T) {
	is := is.New(t)
	run := dashboard.NewTrainRun("pretrain")
	run.OnReport(train.Report{Iteration: 1, Slices: []string{"s0"}, Profilers: []string{"h0:9400", "h1:9401"}})
	st := run.Status()
	is.Equal(st.Profilers, []string{"h0:9400", "h1:9401"})
	var buf bytes.Buffer
	is.NoErr(dashboard.WriteStatus(&buf, &dashboard.View{Train: []dashboard.RunStatus{st}}))
	is.True(strings.Contains(buf.String(), "profilers (rank order): h0:9400 h1:9401"))
}
