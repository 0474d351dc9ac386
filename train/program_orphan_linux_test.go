package train_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/train"
)

// TestProgramDiesWithItsWorker: the worker process that started a
// program is killed (SIGKILL: an OOM kill, a crash, a deleted pod's
// process): the program, which runs in a process group of its own, is
// killed with it instead of running on with nobody to stop it (holding its
// TPU chips and ports). The directory of goray_train.py it left behind
// is removed when the next program starts.
func TestProgramDiesWithItsWorker(t *testing.T) {
	is := is.New(t)
	dir, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp) // the worker processes' temporary directory
	_, c := newCluster(t, "4x4", 1, true)
	// Every program writes "pid ppid" (its parent is the worker process
	// that runs its rank) and sleeps; none ever ends by itself.
	script := `echo $$ $PPID > "$PIDS/rank$GORAY_TRAIN_RANK.tmp" && mv "$PIDS/rank$GORAY_TRAIN_RANK.tmp" "$PIDS/rank$GORAY_TRAIN_RANK" && exec sleep 600`
	var programs []int
	t.Cleanup(func() { // without the fix, a program is left: do not leak it
		for _, pid := range programs {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	killed := make(chan error, 1)
	var worker int
	go func() {
		// When every rank's program is up, kill rank 0's worker process.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			ents, _ := os.ReadDir(dir)
			up := 0
			for _, e := range ents {
				if !strings.HasSuffix(e.Name(), ".tmp") {
					up++
				}
			}
			if up == 4 {
				break
			}
			if time.Now().After(deadline) {
				killed <- os.ErrDeadlineExceeded
				return
			}
		}
		for r := range 4 {
			b, err := os.ReadFile(filepath.Join(dir, "rank"+strconv.Itoa(r)))
			if err != nil {
				killed <- err
				return
			}
			f := strings.Fields(string(b))
			pid, _ := strconv.Atoi(f[0])
			ppid, _ := strconv.Atoi(f[1])
			programs = append(programs, pid)
			if r == 0 {
				worker = ppid
			}
		}
		if worker == os.Getpid() {
			killed <- os.ErrInvalid // the program runs in this process, not a worker process
			return
		}
		killed <- syscall.Kill(worker, syscall.SIGKILL)
	}()
	tr, err := train.NewProgram(c, train.Program{Path: "/bin/sh", Args: []string{"-c", script}, Env: map[string]string{"PIDS": dir}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "orphan", Progress: train.ProgressOff, Output: testWriter{t}})
	is.NoErr(err)
	_, err = tr.Fit(ctx)
	is.NoErr(<-killed)
	is.True(err != nil) // a worker process died
	t.Log(err)
	// Every program is gone (polled up to 10 s: a killed process is reaped
	// by init).
	for _, pid := range programs {
		for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("program %d outlived the worker process that started it", pid)
			}
		}
	}

	// Once the killed worker process is reaped, the next run's programs
	// remove what it left in the temporary directory, and their own.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(worker)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed worker process %d was not reaped", worker)
		}
	}
	tr, err = train.NewProgram(c, train.Program{Path: "/bin/sh", Args: []string{"-c", "exit 0"}},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Name: "next", Progress: train.ProgressOff, Output: testWriter{t}})
	is.NoErr(err)
	_, err = tr.Fit(ctx)
	is.NoErr(err)
	left, err := filepath.Glob(filepath.Join(tmp, "goray-train-py-*"))
	is.NoErr(err)
	is.Equal(left, []string(nil)) // nothing of goray_train.py is left
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}
