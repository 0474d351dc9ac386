package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	return c.store.read(ctx, c.Iteration, rank)
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
