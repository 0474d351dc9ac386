package storage_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
)

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("no process to reap: %v", err)
	}
	return cmd.Process.Pid
}

// RemoveDebris removes the temporary files of writers that are gone (a
// process killed mid-write) and the directories they alone kept; it
// leaves a write in progress in this process and one of a running
// process alone, and the objects themselves.
func TestRemoveDebris(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	b, err := storage.Dir(dir)
	is.NoErr(err)
	defer b.Close()
	is.NoErr(storage.WriteAll(ctx, b, "run/ck1/data", []byte("d")))
	dead := strconv.Itoa(deadPID(t))
	mk := func(rel string) string {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		is.NoErr(os.MkdirAll(filepath.Dir(p), 0o755))
		is.NoErr(os.WriteFile(p, []byte("partial"), 0o600))
		return p
	}
	killed := mk("run/ck2/.rank_0.goray-tmp-" + dead + "-abc")                      // a directory with only debris
	beside := mk("run/ck1/.rank_1.goray-tmp-" + dead + "-def")                      // debris beside an object
	running := mk("run/ck3/.rank_0.goray-tmp-" + strconv.Itoa(os.Getppid()) + "-x") // a running process's write
	outside := mk("other/.x.goray-tmp-" + dead + "-1")                              // not under the prefix
	w, err := b.NewWriter(ctx, "run/ck4/data")                                      // this process's write in progress
	is.NoErr(err)

	n, err := b.(storage.DebrisRemover).RemoveDebris(ctx, "run/")
	is.NoErr(err)
	is.Equal(n, 2)
	for _, p := range []string{killed, beside, filepath.Dir(killed)} {
		_, err := os.Stat(p)
		is.True(os.IsNotExist(err)) // removed, directory and all
	}
	for _, p := range []string{running, outside, filepath.Join(dir, "run/ck1/data")} {
		_, err := os.Stat(p)
		is.NoErr(err) // kept
	}
	_, err = w.Write([]byte("x"))
	is.NoErr(err)
	is.NoErr(w.Close()) // the write in progress finished
	got, err := storage.ReadAll(ctx, b, "run/ck4/data")
	is.NoErr(err)
	is.Equal(string(got), "x")
	_, err = b.(storage.DebrisRemover).RemoveDebris(ctx, "../")
	is.True(err != nil) // a prefix outside the bucket is refused
}

// TestWritesRaceRemoveDebris: writers keep writing into fresh directories
// while another goroutine removes debris and deletes what was written
// (which removes the directories it leaves empty): no write fails. Before
// the fix a write failed when RemoveDebris took its temporary file, just
// created, for a dead writer's, or removed its directory between its
// creation and the temporary file's.
func TestWritesRaceRemoveDebris(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, err := storage.Dir(t.TempDir())
	is.NoErr(err)
	defer b.Close()
	dr := b.(storage.DebrisRemover)
	stop := make(chan struct{})
	cleaned := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				cleaned <- nil
				return
			default:
			}
			if _, err := dr.RemoveDebris(ctx, "run/"); err != nil {
				cleaned <- err
				return
			}
			for obj, err := range b.List(ctx, "run/") {
				if err != nil {
					cleaned <- err
					return
				}
				b.Delete(ctx, obj.Key) //nolint:errcheck // a writer's own delete may come first
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8*100)
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if err := storage.WriteAll(ctx, b, fmt.Sprintf("run/w%d-%d/data", w, i), []byte("x")); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	is.NoErr(<-cleaned)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRemoveDebrisKeepsEmptyDirectories: an empty directory that held no
// debris is someone's, made to be written in (a training program's
// staging directory between its creation and its first file); only the
// directories that debris leaves empty go. Before the fix RemoveDebris
// removed every empty directory under the prefix, and a program's open
// of a file in the directory it had just made failed.
func TestRemoveDebrisKeepsEmptyDirectories(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	b, err := storage.Dir(dir)
	is.NoErr(err)
	defer b.Close()
	staged := filepath.Join(dir, "run", "staging", "rank_00000-abc")
	is.NoErr(os.MkdirAll(staged, 0o755))
	is.NoErr(os.MkdirAll(filepath.Join(dir, "other", "empty"), 0o755))
	debris := filepath.Join(dir, "run", "ck1", "sub", ".rank_0.goray-tmp-"+strconv.Itoa(deadPID(t))+"-abc")
	is.NoErr(os.MkdirAll(filepath.Dir(debris), 0o755))
	is.NoErr(os.WriteFile(debris, []byte("partial"), 0o600))

	n, err := b.(storage.DebrisRemover).RemoveDebris(ctx, "run/")
	is.NoErr(err)
	is.Equal(n, 1)
	_, err = os.Stat(staged)
	is.NoErr(err) // the empty directory that held no debris is kept
	_, err = os.Stat(filepath.Join(dir, "run", "ck1"))
	is.True(os.IsNotExist(err)) // what the debris alone kept is gone
	_, err = os.Stat(filepath.Join(dir, "run"))
	is.NoErr(err) // the prefix still holds the staging directory

	n, err = b.(storage.DebrisRemover).RemoveDebris(ctx, "")
	is.NoErr(err)
	is.Equal(n, 0)
	_, err = os.Stat(filepath.Join(dir, "other", "empty"))
	is.NoErr(err) // nothing is removed where there was no debris
}
