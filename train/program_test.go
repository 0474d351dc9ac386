package train_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

// TestProgram runs a real program (python3) on every host and checks,
// inside the program, each host's env; rank 0 listens on the coordinator
// address and every other rank connects to it.
func TestProgram(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices int
		procs  bool
	}{
		{"one slice", 1, false},
		{"two slices", 2, false},
		{"two slices, worker processes", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", tc.slices, tc.procs)
			var out bytes.Buffer
			tr, err := train.NewProgram(c, train.Program{Path: "python3", Args: []string{abs(t, "testdata/host.py"), "meet"}, Env: map[string]string{"EXTRA": "yes"}},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: tc.slices},
				train.RunConfig{Progress: train.ProgressOff, Output: &out})
			is.NoErr(err)
			_, err = tr.Fit(context.Background())
			is.NoErr(err)
			world := 4 * tc.slices
			lines := out.String()
			t.Log(lines)
			for r := range world {
				is.True(strings.Contains(lines, fmt.Sprintf("[rank %d] rank %d worker %d of ", r, r, r%4))) // every host ran, with its worker ID
			}
			is.Equal(strings.Count(lines, "env ok"), world) // every host's env checked out
			is.True(!strings.Contains(lines, "BAD"))
			is.Equal(strings.Count(lines, "met the coordinator"), world-1) // stderr is streamed too
			is.True(strings.Contains(lines, "[rank 0] coordinator met ranks "))
			assertReleased(t, c)
		})
	}
}

// TestProgramFailsFast: one host's program exits 3; the run fails naming
// it, and every other host's program is stopped.
func TestProgramFailsFast(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(fmt.Sprintf("processes=%v", procs), func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 1, procs)
			dir := t.TempDir()
			var out bytes.Buffer
			tr, err := train.NewProgram(c, train.Program{Path: "python3", Args: []string{abs(t, "testdata/host.py"), "fail", dir}, Env: map[string]string{"EXTRA": "yes"}},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Progress: train.ProgressOff, Output: &out})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.True(err != nil)
			t.Log(err)
			is.Equal(res.Failures[0].Rank, 1)
			is.True(strings.Contains(res.Failures[0].Cause, "exit status 3"))
			is.True(strings.Contains(out.String(), "[rank 1] rank 1 gives up"))
			pids, _ := filepath.Glob(filepath.Join(dir, "pid-*"))
			for _, f := range pids {
				b, err := os.ReadFile(f)
				is.NoErr(err)
				pid, err := strconv.Atoi(string(b))
				is.NoErr(err)
				is.Equal(syscall.Kill(pid, 0), syscall.ESRCH) // the process is gone
			}
			assertReleased(t, c)
		})
	}
}

func abs(t testing.TB, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
