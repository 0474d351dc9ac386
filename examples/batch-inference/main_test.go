package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) {
	ray.Main()
	goleak.VerifyTestMain(m)
}

// TestPipeline generates 1000 reviews, runs the job on the simulator (user
// code on goroutines, and in worker processes, where every row crosses the
// codec and a process boundary) and checks the JSON Lines output row by row
// against the stand-in model, and that every slice is free afterwards.
func TestPipeline(t *testing.T) {
	tests := []struct {
		name string
		opts *local.Options
	}{
		{"goroutines", nil},
		{"worker processes", &local.Options{Processes: &local.ProcessOptions{Count: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testPipeline(t, tt.opts) })
	}
}

func testPipeline(t *testing.T, opts *local.Options) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "reviews.jsonl"), filepath.Join(dir, "scores.jsonl")
	f, err := os.Create(in)
	is.NoErr(err)
	const n = 1000
	is.NoErr(Generate(f, n))
	is.NoErr(f.Close())

	b, err := local.New(ClusterSpec(), opts)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	var st data.Stats
	is.NoErr(Pipeline(c, data.LocalFiles(in), data.LocalFiles(out))(ctx, data.CollectStats(&st), data.Progress(false)))

	reviews, err := data.Take(ctx, data.ReadJSONL[Review](data.LocalFiles(in)), n+1)
	is.NoErr(err)
	got, err := data.Take(ctx, data.ReadJSONL[Prediction](data.LocalFiles(out)), n+1)
	is.NoErr(err)
	is.Equal(len(got), n) // every review scored once
	w := weights(Seed)
	slicesSeen := map[string]bool{}
	for i, p := range got {
		is.Equal(p.ID, i) // in input order
		ids := tokenize(reviews[i].Text)
		s := Score(w, ids)
		is.Equal(p.Score, s)
		is.Equal(p.Label, Label(s))
		is.Equal(p.Tokens, len(ids))
		slicesSeen[p.Slice] = true
	}
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	var names []string
	for _, s := range states {
		names = append(names, s.Name)
		is.True(s.ReservedBy == 0) // every slice released
	}
	for s := range slicesSeen {
		is.True(slices.Contains(names, s)) // scored on a reserved v6e 2x2 slice
	}
	pool := st.Operators[2].Pool
	is.True(pool.SlicesReserved >= 1)
	is.Equal(pool.Started, pool.Stopped)
	is.Equal(st.Rows, int64(n))
}
