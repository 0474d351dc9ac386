package ray_test

import (
	"context"
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

// TestRunOnSliceRetries: Retries and RetryOnError re-run every host's work
// on a fresh reservation; a host's task is never retried alone.
func TestRunOnSliceRetries(t *testing.T) {
	tests := []struct {
		name     string
		fail     error
		opts     []ray.TaskOption
		wantCode ray.ErrorCode
		wantRuns int // task attempts in all
		wantRes  int // reservations made
	}{
		{"UnavailableRetried", backend.Errorf(backend.Unavailable, "host", "host w1 died"), []ray.TaskOption{ray.Retries(1)}, ray.OK, 8, 2},
		{"UnavailableNoRetries", backend.Errorf(backend.Unavailable, "host", "host w1 died"), nil, ray.Unavailable, 4, 1},
		{"UserErrorNotRetried", errors.New("bad step"), []ray.TaskOption{ray.Retries(2)}, ray.TaskFailed, 4, 1},
		{"UserErrorRetriedOnError", errors.New("bad step"), []ray.TaskOption{ray.Retries(2), ray.RetryOnError(true)}, ray.OK, 8, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			ctx := context.Background()
			fb := fake.New(nil)
			c, err := ray.NewCluster(ctx, fb, nil)
			is.NoErr(err)
			defer c.Close()
			fb.FailNext(sliceWorker.Name(), 1, tt.fail)
			out, err := ray.Dispatch(ctx, c, spec4x4, sliceWorker, struct{}{}, tt.opts...)
			is.Equal(ray.CodeOf(err), tt.wantCode)
			if tt.wantCode == ray.OK {
				is.Equal(len(out), 4)
			}
			is.Equal(len(fb.CallsTo(sliceWorker.Name())), tt.wantRuns)
			is.Equal(len(fb.CallsOf(fake.KindPlacementGroup)), tt.wantRes)
		})
	}
}
