package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// TestCheckpointOnURLs: train.py writes and reads its checkpoint
// directory through fsspec when the run's storage is a bucket (a gs:// URL
// from goray_train.staging_dir and get_checkpoint, as on GKE), and with
// plain files otherwise. fsspec here is a stand-in that maps gs:// to a
// local directory (neither fsspec nor a bucket is on CI).
func TestCheckpointOnURLs(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	is := is.New(t)
	mods, bucket, local := t.TempDir(), t.TempDir(), t.TempDir()
	is.NoErr(os.WriteFile(filepath.Join(mods, "goray_train.py"), nil, 0o644)) // train.py imports it; not called here
	is.NoErr(os.WriteFile(filepath.Join(mods, "fsspec.py"), []byte(`import builtins, os
calls = []
def open(url, mode="r"):
    assert url.startswith("gs://"), url
    calls.append(url)
    path = os.path.join(os.environ["BUCKET"], url[len("gs://"):])
    if "w" in mode:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return builtins.open(path, mode)
`), 0o644))
	script := `import fsspec, train
train.save_params("gs://ckpt/runs/r/staging/rank_0", [1.5, -2])
assert train.load_params("gs://ckpt/runs/r/staging/rank_0/") == [1.5, -2]
assert len(fsspec.calls) == 2, fsspec.calls
train.save_params(LOCAL, [3])
assert train.load_params(LOCAL) == [3]
assert len(fsspec.calls) == 2, fsspec.calls
`
	cmd := exec.Command(python, "-c", strings.Replace(script, "LOCAL", fmt.Sprintf("%q", local), 2))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+mods+string(os.PathListSeparator)+".", "BUCKET="+bucket)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(bucket, "ckpt", "runs", "r", "staging", "rank_0", "params.json"))
	is.NoErr(err)
	is.Equal(strings.TrimSpace(string(b)), "[1.5, -2]")
	_, err = os.Stat(filepath.Join(local, "params.json"))
	is.NoErr(err)
}
