package train_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

func TestProgress(t *testing.T) {
	for _, tc := range []struct {
		name     string
		progress train.Progress
		interval int
		want     []string
		count    map[string]int
	}{
		{name: "log lines, every report", progress: train.ProgressLog, interval: -1,
			want:  []string{`msg="train: report" run=progress attempt=0 iteration=1 attempt=0 resumed_from=0 value=10`, "iteration=3 "},
			count: map[string]int{"train: report": 3}},
		{name: "log lines, throttled", progress: train.ProgressLog, interval: 1,
			want:  []string{"iteration=1 ", "iteration=3 "}, // the first and the last
			count: map[string]int{"train: report": 2}},
		{name: "live line", progress: train.ProgressBar, want: []string{"progress attempt 0: attempt=0 resumed_from=0 value=30", "3/3"}},
		{name: "off", progress: train.ProgressOff, count: map[string]int{"train": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 1, false)
			var out bytes.Buffer
			tr, err := train.New(c, counting, countCfg{Iters: 3, Len: 1},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Name: "progress", Progress: tc.progress, ProgressOutput: &out, TotalIterations: 3,
					ProgressInterval: time.Duration(tc.interval) * time.Hour})
			is.NoErr(err)
			_, err = tr.Fit(context.Background())
			is.NoErr(err)
			for _, w := range tc.want {
				is.True(strings.Contains(out.String(), w)) // the progress shows the metrics
			}
			for s, n := range tc.count {
				is.Equal(strings.Count(out.String(), s), n)
			}
		})
	}
}
