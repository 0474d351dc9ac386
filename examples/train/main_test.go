package main

import (
	"bytes"
	"context"
	_ "embed"
	"math"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

func TestMain(m *testing.M) {
	ray.Main() // the test binary is the worker processes' executable
	goleak.VerifyTestMain(m)
}

//go:embed testdata/output.txt
var want string

func newCluster(t *testing.T, procs bool) (*local.Backend, *ray.Cluster) {
	t.Helper()
	opts := &local.Options{}
	if procs {
		opts.Processes = &local.ProcessOptions{Count: 2}
	}
	b, err := local.New(clusterSpec(), opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return b, c
}

// TestOutput runs the example: it converges on one slice despite a lost
// host, and on two slices, to the known answer.
func TestOutput(t *testing.T) {
	bk, c := newCluster(t, false)
	var out bytes.Buffer
	if err := run(context.Background(), bk, c, &out, train.ProgressOff); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	assertReleased(t, c)
}

// TestSameAnswerAfterFailure: the run that lost a host and resumed from a
// checkpoint ends with exactly the weights of a run that never failed, in
// process and with worker processes.
func TestSameAnswerAfterFailure(t *testing.T) {
	ctx := context.Background()
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in process", true: "worker processes"}[procs], func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, procs)
			clean, err := fit(ctx, c, 1, train.ProgressOff, nil)
			is.NoErr(err)
			is.Equal(clean.Result.Attempts, 1)

			bk, c := newCluster(t, procs)
			var killErr error
			failed, err := fit(ctx, c, 1, train.ProgressOff, func(r train.Report) {
				if r.Attempt == 0 && r.Iteration == 37 {
					killErr = bk.PreemptSlice(ctx, r.Slices[0])
				}
			})
			is.NoErr(err)
			is.NoErr(killErr)
			is.Equal(failed.Result.Attempts, 2)
			is.Equal(failed.Result.Failures[0].ResumeFrom, 30) // the last checkpoint before the failure
			is.Equal(ray.CodeOf(failed.Result.Failures[0].Err), ray.Unavailable)
			is.Equal(failed.W, clean.W) // bit for bit
			for j, w := range TrueW {
				is.True(math.Abs(failed.W[j]-w) < 1e-6)
			}
			assertReleased(t, c)
		})
	}
}

func assertReleased(t *testing.T, c *ray.Cluster) {
	t.Helper()
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.ReservedBy != 0 {
			t.Errorf("slice %s still reserved", st.Name)
		}
	}
}
