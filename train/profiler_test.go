package train_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

// profilerCheck fails unless the rank's env carries ProfilerPort + rank
// (config is the port), then reports once.
var profilerCheck = train.NewLoop("train_test.profiler", func(ctx context.Context, w *train.Worker, port int) error {
	if got, want := w.Getenv(train.ProfilerPortEnv), strconv.Itoa(port+w.Rank()); got != want {
		return fmt.Errorf("rank %d: %s=%q, want %q", w.Rank(), train.ProfilerPortEnv, got, want)
	}
	return w.Report(ctx, train.Metrics{"x": 1}, nil)
})

// RunConfig.ProfilerPort gives every rank ProfilerPort + rank in its env
// and every report the ranks' addresses; a port range past 65535 is
// refused when the trainer is made.
func TestProfilerPort(t *testing.T) {
	is := is.New(t)
	_, c := newCluster(t, "4x4", 1, false)
	var profilers []string
	tr, err := train.New(c, profilerCheck, 9400,
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Progress: train.ProgressOff, ProfilerPort: 9400, OnReport: func(r train.Report) { profilers = r.Profilers }})
	is.NoErr(err)
	_, err = tr.Fit(context.Background())
	is.NoErr(err)                                                                                         // every rank saw its port
	is.Equal(profilers, []string{"127.0.0.1:9400", "127.0.0.1:9401", "127.0.0.1:9402", "127.0.0.1:9403"}) // the simulator's ranks are local

	_, err = train.New(c, profilerCheck, 0, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{ProfilerPort: 65534})
	is.True(err != nil && strings.Contains(err.Error(), "ProfilerPort 65534")) // ranks 0-3 need 65534-65537
}
