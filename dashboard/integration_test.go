package dashboard_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/train"
)

// countdown reports three iterations, with a checkpoint at the second.
var countdown = train.NewLoop("dashboard_test.countdown", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	for i := range 3 {
		var ck []byte
		if i == 1 {
			ck = []byte("state")
		}
		if err := w.Report(ctx, train.Metrics{"loss": float64(3 - i)}, ck); err != nil {
			return err
		}
	}
	return nil
})

// TestTrainRunFromFit feeds a TrainRun from a real run's OnReport.
func TestTrainRunFromFit(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	run := dashboard.NewTrainRun("countdown")
	d.TrackRun(run)
	tr, err := train.New(c, countdown, struct{}{},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "countdown", Progress: train.ProgressOff, OnReport: run.OnReport})
	is.NoErr(err)
	res, err := tr.Fit(timeout(t))
	run.Finish(res, err)
	is.NoErr(err)
	st := d.View(t.Context()).Train[0]
	is.Equal(st.Iteration, 3)
	is.Equal(st.Attempt, 0)
	is.Equal(len(st.Points), 3)
	is.Equal(st.Metrics, train.Metrics{"loss": 1})
	is.Equal(st.Checkpoints, []int{2})
	is.Equal(len(st.Slices), 1)
	is.True(st.Done)
	is.Equal(st.Error, "")
}

type echo struct{}

var (
	echoClass = ray.NewActorClass("dashboard_test.echo", func(ctx context.Context, _ struct{}) (*echo, error) { return &echo{}, nil })
	echoCall  = ray.NewMethod(echoClass, "echo", func(ctx context.Context, _ *echo, in string) (string, error) { return in, nil })
)

// TestTrackServeServer shows a real deployment, and its replica's slice
// as reserved.
func TestTrackServeServer(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	srv := serve.New(c, nil)
	defer srv.Shutdown(context.WithoutCancel(ctx))
	d.TrackServe(srv)
	is.NoErr(srv.Deploy(ctx, serve.Deployment{
		Name:        "echo",
		Replica:     serve.Actor(echoClass, struct{}{}, serve.Unary(echoCall)),
		Accelerator: "v5p", Topology: "2x2x2",
		MinReplicas: 1, MaxReplicas: 1,
	}))
	v := d.View(ctx)
	is.Equal(len(v.Serve), 1)
	is.Equal(v.Serve[0].Name, "echo")
	is.Equal(len(v.Serve[0].Replicas), 1)
	held := v.Serve[0].Replicas[0].Slices
	is.Equal(held, []string{"v5p-16-0"})
	s, _ := findSlice(v, "v5p-16-0")
	is.Equal(s.State, dashboard.StateReserved)
}

// TestTrainRunFailureLive: a failed attempt shows in the view as soon as
// the run knows of it (RunConfig.OnFailure), before Fit returns.
func TestTrainRunFailureLive(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	run := dashboard.NewTrainRun("lossy")
	d.TrackRun(run)
	var killErr error
	var liveFailures []dashboard.RunFailure
	var lost string
	onReport := func(r train.Report) {
		run.OnReport(r)
		switch {
		case r.Attempt == 0 && r.Iteration == 2:
			states, err := ray.TPUSlices(ctx, c)
			if err != nil {
				killErr = err
				return
			}
			for _, st := range states {
				if st.Name == r.Slices[0] {
					lost = st.Hosts[1].Node
					killErr = c.Backend().(backend.FaultInjector).KillNode(ctx, lost)
				}
			}
		case r.Attempt == 1 && liveFailures == nil:
			liveFailures = d.View(ctx).Train[0].Failures
		}
	}
	tr, err := train.New(c, countdown, struct{}{},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "lossy", Progress: train.ProgressOff, MaxFailures: 1, OnReport: onReport, OnFailure: run.OnFailure})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(killErr)
	is.NoErr(err)
	is.Equal(len(res.Failures), 1)
	is.Equal(len(liveFailures), 1) // seen while the second attempt ran
	is.Equal(liveFailures[0].Attempt, 0)
	is.Equal(liveFailures[0].Host, lost) // the lost host, named
	run.Finish(res, err)
	is.Equal(len(d.View(ctx).Train[0].Failures), 1) // Finish does not count it twice
}
