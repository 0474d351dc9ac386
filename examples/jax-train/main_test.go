package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

func TestMain(m *testing.M) {
	ray.Main()
	goleak.VerifyTestMain(m)
}

// TestKilledHostResumes runs the example on the simulator with python3
// (train.py's pure-Python step where JAX is not installed): a host dies at
// step 35, every process resumes from the checkpoint of step 30 on a fresh
// slice, and the run converges to the known answer.
func TestKilledHostResumes(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	var programs bytes.Buffer
	o, err := Run(context.Background(), b, c, Options{Python: "python3", Steps: 80, Every: 10, KillAt: 35, Storage: t.TempDir(), Progress: train.ProgressOff, Output: &programs})
	t.Log(programs.String())
	is.NoErr(err)
	res := o.Result
	is.Equal(res.Attempts, 2)
	is.Equal(len(res.Failures), 1)
	is.Equal(ray.CodeOf(res.Failures[0].Err), ray.Unavailable)
	is.Equal(res.Failures[0].ResumeFrom, 30) // every rank had reported step 30 before rank 0 reported 35
	is.Equal(res.Iteration, 80)
	is.True(res.Metrics["loss"] < 1e-12)
	is.True(o.MaxError() < 1e-6)
	for rank := range 4 {
		is.True(strings.Contains(programs.String(), "rank "+string(rune('0'+rank))+" of 4")) // every host ran
	}
	is.True(strings.Contains(programs.String(), "starts at step 30, attempt 1")) // resumed from the checkpoint
	var out bytes.Buffer
	Print(&out, o)
	t.Log(out.String())
	is.True(strings.Contains(out.String(), "every parameter within 1e-6: true"))
}
