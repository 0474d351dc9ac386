package train_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/matryer/is"
	"github.com/samber/lo"

	"github.com/goray-dev/goray/train"
)

// TestCheckpointStorage runs on file:// storage: it keeps the newest N
// complete checkpoints, and a later run of the same name resumes from the
// latest complete one, ignoring a half-written newer one.
func TestCheckpointStorage(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	_, c := newCluster(t, "4x4", 1, false)
	dir := t.TempDir()
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	run := train.RunConfig{Name: "ckpt", Storage: "file://" + dir, KeepCheckpoints: 2, Progress: train.ProgressOff}

	tr, err := train.New(c, counting, countCfg{Iters: 6, Len: 4}, scaling, run)
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	is.Equal(res.Metrics["value"], 60.0)
	is.Equal(res.Metrics["resumed_from"], 0.0)
	is.Equal(iterations(res.Checkpoints), []int{5, 6}) // the 2 newest
	is.Equal(res.Checkpoint.Ranks, []int{0})           // only rank 0 saved data
	is.Equal(res.Checkpoint.Metrics["value"], 60.0)
	is.Equal(dirs(t, filepath.Join(dir, "ckpt")), []string{"checkpoint_000000005", "checkpoint_000000006"})
	data, err := res.Checkpoint.Load(ctx, 0)
	is.NoErr(err)
	is.Equal(string(data), "[60,60,60,60]")
	_, err = res.Checkpoint.Load(ctx, 1)
	is.True(err != nil) // rank 1 saved nothing

	// A crash while writing checkpoint 9: data but no COMPLETE marker.
	debris := filepath.Join(dir, "ckpt", "checkpoint_000000009")
	is.NoErr(os.MkdirAll(debris, 0o755))
	is.NoErr(os.WriteFile(filepath.Join(debris, "rank_00000"), []byte("[999, half"), 0o644))
	// A driver killed in the middle of writing checkpoints 7 and 8 (one
	// with nothing but the file:// bucket's temporary file): what it left
	// goes at the next pruning, as docs/train.md says.
	cmd := exec.Command("true")
	is.NoErr(cmd.Run())
	dead := strconv.Itoa(cmd.Process.Pid)
	for _, p := range []string{"checkpoint_000000007/.rank_00000.goray-tmp-" + dead + "-a", "checkpoint_000000008/.COMPLETE.goray-tmp-" + dead + "-b"} {
		p = filepath.Join(dir, "ckpt", filepath.FromSlash(p))
		is.NoErr(os.MkdirAll(filepath.Dir(p), 0o755))
		is.NoErr(os.WriteFile(p, []byte("partial"), 0o600))
	}

	tr, err = train.New(c, counting, countCfg{Iters: 10, Len: 4}, scaling, run)
	is.NoErr(err)
	res, err = tr.Fit(ctx)
	is.NoErr(err)
	is.Equal(res.Metrics["resumed_from"], 6.0) // the latest complete, not the debris
	is.Equal(res.Metrics["value"], 100.0)
	is.Equal(iterations(res.Checkpoints), []int{9, 10})
	data, err = res.Checkpoint.Load(ctx, 0)
	is.NoErr(err)
	is.Equal(string(data), "[100,100,100,100]")
	is.Equal(dirs(t, filepath.Join(dir, "ckpt")), []string{"checkpoint_000000009", "checkpoint_000000010"}) // no debris left
}

func iterations(cks []*train.Checkpoint) []int {
	return lo.Map(cks, func(ck *train.Checkpoint, _ int) int { return ck.Iteration })
}

// dirs lists the non-empty directories in dir.
func dirs(t testing.TB, dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		files, _ := os.ReadDir(filepath.Join(dir, e.Name()))
		if e.IsDir() && len(files) > 0 {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}
