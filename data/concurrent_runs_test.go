package data_test

import (
	"context"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
)

// TestConcurrentRunsOfOneDataset: runs of one dataset started at once
// (as train starts epochs, or two sinks) share nothing; under -race this
// caught a source that wrote to its captured arguments when it started.
func TestConcurrentRunsOfOneDataset(t *testing.T) {
	is := is.New(t)
	d := data.Map(data.Range(1000), func(_ context.Context, i int) (int, error) { return 2 * i, nil })
	var wg sync.WaitGroup
	counts := make([]int64, 8)
	errs := make([]error, 8)
	for i := range counts {
		wg.Go(func() { counts[i], errs[i] = data.Count(context.Background(), d, data.Progress(false)) })
	}
	wg.Wait()
	for i := range counts {
		is.NoErr(errs[i])
		is.Equal(counts[i], int64(1000))
	}
}
