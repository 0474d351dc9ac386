package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/samber/lo"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/storage"
)

// Checkpoint is a complete checkpoint of a run: the data each rank saved
// with its N-th [Worker.Report], committed once every rank had reported
// iteration N. It is safe for concurrent use.
type Checkpoint struct {
	// Iteration is the report number the checkpoint was taken at.
	Iteration int `json:"iteration"`
	// Metrics are rank 0's metrics of that report.
	Metrics Metrics `json:"metrics,omitempty"`
	// Ranks lists the ranks that saved data, ascending.
	Ranks []int `json:"ranks"`
	// Attempt is the attempt that wrote it.
	Attempt int `json:"attempt"`
	// Time is when it was committed.
	Time time.Time `json:"time"`
	// Datasets are where every rank was in each dataset of
	// RunConfig.Datasets at this report; a run resumed from the checkpoint
	// starts each rank's shard there (see DatasetShard).
	Datasets map[string]*DatasetPosition `json:"datasets,omitempty"`
	// Dirs lists the ranks, among Ranks, whose data is a directory an
	// external program committed (see docs/train.md, "Reports from
	// programs"); read it at [Checkpoint.Dir].
	Dirs []int `json:"dirs,omitempty"`

	store *store `ray:"-"` // the driver's; a worker reads its checkpoint through the rendezvous
}

func (c *Checkpoint) hasRank(r int) bool { return slices.Contains(c.Ranks, r) }

// Load reads the data rank saved in the checkpoint, from the run's storage
// (in the driver). After Fit returned it reopens RunConfig.Storage, which
// works for file://, gs:// and s3:// but not for the default mem:// (pass
// RunConfig.Bucket to keep an in-memory bucket).
func (c *Checkpoint) Load(ctx context.Context, rank int) ([]byte, error) {
	if c.store == nil {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: Checkpoint.Load: the checkpoint has no storage (use Worker.LoadCheckpoint inside a loop)")
	}
	if !c.hasRank(rank) {
		return nil, backend.Errorf(backend.NotFound, "", "train: checkpoint %d has no data of rank %d; ranks with data: %v", c.Iteration, rank, c.Ranks)
	}
	if slices.Contains(c.Dirs, rank) {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: checkpoint %d: rank %d committed a directory, not data: read it at Checkpoint.Dir(%d)", c.Iteration, rank, rank)
	}
	return c.store.read(ctx, c.Iteration, rank)
}

// Dir returns where the directory rank committed in the checkpoint is: a
// local path for file:// storage, a URL (gs://...) otherwise.
func (c *Checkpoint) Dir(rank int) (string, error) {
	if !slices.Contains(c.Dirs, rank) {
		return "", backend.Errorf(backend.NotFound, "", "train: checkpoint %d has no directory of rank %d; ranks with directories: %v", c.Iteration, rank, c.Dirs)
	}
	if c.store == nil || c.store.location() == "" {
		return "", backend.Errorf(backend.FailedPrecondition, "", "train: Checkpoint.Dir: the checkpoint has no storage")
	}
	return c.store.locate(c.store.rankKey(c.Iteration, rank)), nil
}

// store keeps a run's checkpoints in a bucket under "<run>/":
//
//	<run>/checkpoint_000000012/rank_00000   data of rank 0
//	<run>/checkpoint_000000012/COMPLETE     JSON Checkpoint, written last
//
// A checkpoint counts only once its COMPLETE marker exists, and the marker
// is written after every rank's data, so a crash mid-write leaves nothing
// that resume would pick up. Each object is written atomically by the
// bucket (a temporary file renamed, for file://). Pruning deletes the
// marker first, for the same reason.
type store struct {
	b      storage.Bucket
	prefix string
	keep   int
	// url is set when Fit opened (and will close) the bucket: reads after
	// Fit open it again. A mem:// bucket is gone by then.
	url    string
	closed atomic.Bool
	// root is the local directory of a file:// storage, and base the URL
	// of another storage that programs can write (gs://...); both empty
	// for mem:// and for RunConfig.Bucket.
	root, base string
}

// location is where programs find the run's storage: a local path for
// file://, a URL otherwise, empty when they cannot reach it.
func (s *store) location() string { return s.locate(strings.TrimSuffix(s.prefix, "/")) }

// locate returns the path or URL of key.
func (s *store) locate(key string) string {
	switch {
	case s.root != "":
		return filepath.Join(s.root, filepath.FromSlash(key))
	case s.base != "":
		return s.base + "/" + key
	}
	return ""
}

// programDir checks a directory a program reported as its checkpoint
// and returns its key in the bucket. It must be under the run's storage,
// outside the run's checkpoints, and (on file://) a real directory.
func (s *store) programDir(dir string) (string, error) {
	loc := s.location()
	if loc == "" {
		return "", backend.Errorf(backend.FailedPrecondition, "", "the run's storage is in the driver's memory (mem:// or RunConfig.Bucket), where a program cannot write: set RunConfig.Storage to file:// (a directory every host shares) or gs://")
	}
	outside := func() error {
		return backend.Errorf(backend.InvalidArgument, "", "checkpoint_dir %q is outside the run's storage %s: write the checkpoint under it (goray_train.staging_dir())", dir, loc)
	}
	var rel string
	if s.root != "" {
		if !filepath.IsAbs(dir) {
			return "", backend.Errorf(backend.InvalidArgument, "", "checkpoint_dir %q is not an absolute path", dir)
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", backend.Errorf(backend.NotFound, "", "checkpoint_dir %q: %w", dir, err)
		}
		realLoc, err := filepath.EvalSymlinks(loc)
		if err != nil {
			return "", outside()
		}
		if rel, err = filepath.Rel(realLoc, real); err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", outside()
		}
		if st, err := os.Lstat(real); err != nil || !st.IsDir() {
			return "", backend.Errorf(backend.InvalidArgument, "", "checkpoint_dir %q is not a directory", dir)
		}
		rel = filepath.ToSlash(rel)
	} else {
		var ok bool
		if rel, ok = strings.CutPrefix(dir, loc+"/"); !ok || storage.ValidKey(strings.TrimSuffix(rel, "/")) != nil {
			return "", outside()
		}
		rel = strings.TrimSuffix(rel, "/")
	}
	if first, _, _ := strings.Cut(rel, "/"); strings.HasPrefix(first, "checkpoint_") || first == finishedName {
		return "", backend.Errorf(backend.InvalidArgument, "", "checkpoint_dir %q is inside the run's committed checkpoints: write a new directory (goray_train.staging_dir())", dir)
	}
	return s.prefix + rel, nil
}

// commitDir moves the directory at key src (from programDir) to rank's
// place in checkpoint it: a rename on file://, a copy then a delete of
// every object elsewhere.
func (s *store) commitDir(ctx context.Context, it, rank int, src string) error {
	dst := s.rankKey(it, rank)
	if s.root != "" {
		from, to := filepath.Join(s.root, filepath.FromSlash(src)), filepath.Join(s.root, filepath.FromSlash(dst))
		// What is there is the rank's part of the same iteration of a
		// failed attempt, a checkpoint that was never completed.
		if err := os.RemoveAll(to); err != nil {
			return storageErr(fmt.Errorf("train: commit the directory of rank %d to checkpoint %d: %w", rank, it, err))
		}
		var err error
		for range 100 {
			// Pruning removes empty directories, such as the checkpoint's
			// made a moment ago: make it again when the rename finds none.
			if err = os.MkdirAll(filepath.Dir(to), 0o755); err == nil {
				if err = os.Rename(from, to); err == nil || !errors.Is(err, fs.ErrNotExist) {
					break
				}
				if _, serr := os.Lstat(from); serr != nil {
					break
				}
			}
		}
		if err != nil {
			return storageErr(fmt.Errorf("train: commit the directory of rank %d to checkpoint %d: %w", rank, it, err))
		}
		return nil
	}
	var keys []string
	for obj, err := range s.b.List(ctx, src+"/") {
		if err != nil {
			return storageErr(fmt.Errorf("train: commit the directory of rank %d to checkpoint %d: %w", rank, it, err))
		}
		keys = append(keys, obj.Key)
	}
	if len(keys) == 0 {
		return backend.Errorf(backend.NotFound, "", "train: commit the directory of rank %d to checkpoint %d: %s holds no object", rank, it, s.locate(src))
	}
	// As on file://: what is there is a failed attempt's.
	for obj, err := range s.b.List(ctx, dst+"/") {
		if err != nil {
			return storageErr(fmt.Errorf("train: commit the directory of rank %d to checkpoint %d: %w", rank, it, err))
		}
		s.b.Delete(ctx, obj.Key) //nolint:errcheck // overwritten below or left as debris of an incomplete checkpoint
	}
	for _, k := range keys {
		if err := copyObject(ctx, s.b, k, dst+strings.TrimPrefix(k, src)); err != nil {
			return storageErr(fmt.Errorf("train: commit the directory of rank %d to checkpoint %d: %w", rank, it, err))
		}
	}
	for _, k := range keys {
		s.b.Delete(ctx, k) //nolint:errcheck // the copy is committed; what stays is debris of the staging area
	}
	return nil
}

func copyObject(ctx context.Context, b storage.Bucket, from, to string) error {
	r, err := b.NewRangeReader(ctx, from, 0, -1)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := b.NewWriter(ctx, to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// stagingName is the directory under the run where goray_train stages
// checkpoint directories; every attempt starts with it cleared.
const stagingName = "staging"

func (s *store) clearStaging(ctx context.Context) error {
	if s.root != "" {
		return storageErr(removeStaged(filepath.Join(s.root, filepath.FromSlash(s.prefix+stagingName))))
	}
	if s.base == "" {
		return nil
	}
	for obj, err := range s.b.List(ctx, s.prefix+stagingName+"/") {
		if err != nil {
			return storageErr(err)
		}
		s.b.Delete(ctx, obj.Key) //nolint:errcheck // debris
	}
	return nil
}

// removingMark is in the name a staging directory is renamed to while it
// is removed.
const removingMark = ".removing-"

// removeStaged removes dir, a staging directory that programs of an
// earlier attempt may still be writing to (on Kubernetes a released
// attempt's pods are deleted in the background, so their programs can run
// on for a moment): os.RemoveAll alone fails ("directory not empty") when
// a file is added after it has read a directory. dir is first renamed to
// a name of its own beside it, where a program that names its files by
// path no longer reaches (its next write fails, or makes a new staging
// directory, which the next clear removes): from then on dir is clear.
// The renamed directory is then removed, with what earlier clears left;
// a file created by a call that was under way at the rename can still
// land in it, so its removal is tried again, and what cannot be removed
// yet (a program still writing through an open directory) is left to the
// next clear.
func removeStaged(dir string) error {
	err := os.Rename(dir, dir+removingMark+strconv.FormatUint(rand.Uint64(), 36))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("train: clear the staged checkpoint directories: %w", err)
	}
	parent := filepath.Dir(dir)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil //nolint:nilerr // dir is clear; the next clear removes the rest
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), filepath.Base(dir)+removingMark) {
			for range 3 {
				if os.RemoveAll(filepath.Join(parent, e.Name())) == nil {
					break
				}
			}
		}
	}
	return nil
}

const markerName = "COMPLETE"

func (s *store) dir(it int) string { return fmt.Sprintf("%scheckpoint_%09d/", s.prefix, it) }

func (s *store) rankKey(it, rank int) string { return fmt.Sprintf("%srank_%05d", s.dir(it), rank) }

func (s *store) writeRank(ctx context.Context, it, rank int, data []byte) error {
	if err := storage.WriteAll(ctx, s.b, s.rankKey(it, rank), data); err != nil {
		return storageErr(fmt.Errorf("train: write checkpoint %d of rank %d: %w", it, rank, err))
	}
	return nil
}

func (s *store) read(ctx context.Context, it, rank int) ([]byte, error) {
	bucket := s.b
	if s.closed.Load() {
		var err error
		if bucket, err = storage.Open(ctx, s.url); err != nil {
			return nil, storageErr(fmt.Errorf("train: read checkpoint %d of rank %d: reopen %q: %w", it, rank, s.url, err))
		}
		defer bucket.Close()
	}
	b, err := storage.ReadAll(ctx, bucket, s.rankKey(it, rank))
	if err != nil {
		return nil, storageErr(fmt.Errorf("train: read checkpoint %d of rank %d: %w", it, rank, err))
	}
	return b, nil
}

// commit writes the marker that makes checkpoint ck complete, then prunes.
func (s *store) commit(ctx context.Context, ck *Checkpoint) error {
	b, err := json.Marshal(ck)
	if err != nil {
		return err
	}
	if err := storage.WriteAll(ctx, s.b, s.dir(ck.Iteration)+markerName, b); err != nil {
		return storageErr(fmt.Errorf("train: commit checkpoint %d: %w", ck.Iteration, err))
	}
	return s.prune(ctx)
}

// scan lists the run's checkpoint directories: all of them, and the
// complete ones, ascending by iteration.
func (s *store) scan(ctx context.Context) (all, complete []int, err error) {
	seen := map[int]bool{}
	for obj, err := range s.b.List(ctx, s.prefix) {
		if err != nil {
			return nil, nil, storageErr(fmt.Errorf("train: list checkpoints under %q: %w", s.prefix, err))
		}
		rest := strings.TrimPrefix(obj.Key, s.prefix)
		dir, file, ok := strings.Cut(rest, "/")
		n, perr := strconv.Atoi(strings.TrimPrefix(dir, "checkpoint_"))
		if !ok || perr != nil || !strings.HasPrefix(dir, "checkpoint_") {
			continue
		}
		if !seen[n] {
			seen[n] = true
			all = append(all, n)
		}
		if file == markerName {
			complete = append(complete, n)
		}
	}
	slices.Sort(all)
	slices.Sort(complete)
	return all, complete, nil
}

// checkpoints returns the complete checkpoints, oldest first.
func (s *store) checkpoints(ctx context.Context) ([]*Checkpoint, error) {
	_, complete, err := s.scan(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Checkpoint, 0, len(complete))
	for _, it := range complete {
		ck, err := s.marker(ctx, it)
		if err != nil {
			return nil, err
		}
		out = append(out, ck)
	}
	return out, nil
}

// latest returns the newest complete checkpoint, or nil.
func (s *store) latest(ctx context.Context) (*Checkpoint, error) {
	_, complete, err := s.scan(ctx)
	if err != nil || len(complete) == 0 {
		return nil, err
	}
	return s.marker(ctx, complete[len(complete)-1])
}

func (s *store) marker(ctx context.Context, it int) (*Checkpoint, error) {
	b, err := storage.ReadAll(ctx, s.b, s.dir(it)+markerName)
	if err != nil {
		return nil, storageErr(fmt.Errorf("train: read checkpoint %d: %w", it, err))
	}
	ck := &Checkpoint{store: s}
	if err := json.Unmarshal(b, ck); err != nil {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: checkpoint %d: corrupt marker: %w", it, err)
	}
	return ck, nil
}

// prune keeps the newest s.keep complete checkpoints and deletes every
// directory older than the oldest kept one (older complete checkpoints
// and debris of crashed writes), marker first. On a bucket where a write
// killed midway leaves a temporary file (storage.DebrisRemover: file://),
// it also removes those under the run, and the directories they alone
// kept.
func (s *store) prune(ctx context.Context) error {
	if s.keep <= 0 {
		return nil
	}
	if dr, ok := s.b.(storage.DebrisRemover); ok {
		if _, err := dr.RemoveDebris(ctx, s.prefix); err != nil {
			return storageErr(fmt.Errorf("train: remove the debris of interrupted checkpoint writes: %w", err))
		}
	}
	all, complete, err := s.scan(ctx)
	if err != nil || len(complete) <= s.keep {
		return err
	}
	oldestKept := complete[len(complete)-s.keep]
	for _, it := range lo.Filter(all, func(n, _ int) bool { return n < oldestKept }) {
		if err := s.deleteDir(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) deleteDir(ctx context.Context, it int) error {
	dir := s.dir(it)
	if err := s.b.Delete(ctx, dir+markerName); err != nil && !errors.Is(err, storage.ErrNotExist) {
		return storageErr(fmt.Errorf("train: delete checkpoint %d: %w", it, err))
	}
	var keys []string
	for obj, err := range s.b.List(ctx, dir) {
		if err != nil {
			return storageErr(fmt.Errorf("train: delete checkpoint %d: %w", it, err))
		}
		keys = append(keys, obj.Key)
	}
	for _, k := range keys {
		if err := s.b.Delete(ctx, k); err != nil && !errors.Is(err, storage.ErrNotExist) {
			return storageErr(fmt.Errorf("train: delete checkpoint %d: %w", it, err))
		}
	}
	return nil
}

// finishedName is the object under "<run>/" that a run's successful end
// writes: a run started again with the same loop (or program) and
// configuration returns the result it records instead of training.
const finishedName = "FINISHED"

// finishedMarker is what a finished run recorded.
type finishedMarker struct {
	Iteration int       `json:"iteration"`
	Metrics   Metrics   `json:"metrics,omitempty"`
	Attempts  int       `json:"attempts"`
	Time      time.Time `json:"time"`
	// Config identifies the loop (or program) and its configuration.
	Config string `json:"config"`
}

// finished returns the run's FINISHED marker, or nil.
func (s *store) finished(ctx context.Context) (*finishedMarker, error) {
	b, err := storage.ReadAll(ctx, s.b, s.prefix+finishedName)
	if errors.Is(err, storage.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, storageErr(fmt.Errorf("train: read %s%s: %w", s.prefix, finishedName, err))
	}
	var m finishedMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: %s%s is corrupt (delete it to train the run again): %w", s.prefix, finishedName, err)
	}
	return &m, nil
}

func (s *store) setFinished(ctx context.Context, m *finishedMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := storage.WriteAll(ctx, s.b, s.prefix+finishedName, b); err != nil {
		return storageErr(fmt.Errorf("train: the run finished, but recording it failed: %w", err))
	}
	return nil
}

func (s *store) clearFinished(ctx context.Context) error {
	if err := s.b.Delete(ctx, s.prefix+finishedName); err != nil && !errors.Is(err, storage.ErrNotExist) {
		return storageErr(fmt.Errorf("train: delete %s%s: %w", s.prefix, finishedName, err))
	}
	return nil
}
