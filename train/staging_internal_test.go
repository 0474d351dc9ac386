package train

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
)

// TestClearStagingBesideWriters: an attempt starts (and clears the run's
// staging directory) while programs of the attempt before are still
// writing into it, as on Kubernetes, where a released attempt's pods are
// deleted in the background. Clearing does not fail because a program
// added a file while it ran (os.RemoveAll alone fails with "directory not
// empty"), and once the writers have stopped a clear leaves nothing.
func TestClearStagingBesideWriters(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	b, err := storage.Dir(dir)
	is.NoErr(err)
	defer b.Close()
	s := &store{b: b, prefix: "run/", root: dir}
	staging := filepath.Join(dir, "run", stagingName)

	const maxDirs = 2000 // per writer: at most 2 x 2000 x 5 entries on disk
	var stop atomic.Bool
	var wrote atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			// What goray_train.staging_dir and a program do: make a fresh
			// directory and write into it; errors are the program's. A
			// writer stops after maxDirs directories: on a loaded machine
			// the writers can outrun the clears, and an unbounded writer
			// filled a disk with millions of files when a run was killed.
			for i := 0; i < maxDirs && !stop.Load(); i++ {
				d := filepath.Join(staging, "rank_0000"+strconv.Itoa(w)+"-"+strconv.Itoa(i))
				if os.MkdirAll(d, 0o755) != nil {
					continue
				}
				for f := range 4 {
					if os.WriteFile(filepath.Join(d, "part"+strconv.Itoa(f)), []byte("x"), 0o644) == nil {
						wrote.Add(1)
					}
				}
			}
		})
	}
	// At least 200 clears, and on until the writers have written 200
	// files beside them (up to a minute: a condition polled).
	for i, deadline := 0, time.Now().Add(time.Minute); i < 200 || (wrote.Load() < 200 && time.Now().Before(deadline)); i++ {
		if err := s.clearStaging(ctx); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("clearing the staging directory beside a writer: %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("the writers wrote %d files", wrote.Load())
	is.True(wrote.Load() >= 200)
	is.NoErr(s.clearStaging(ctx))
	ents, err := os.ReadDir(filepath.Join(dir, "run"))
	is.NoErr(err)
	is.Equal(len(ents), 0) // neither staging nor anything of the clear's own
}
