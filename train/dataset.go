package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/goray-dev/goray/data"

	"github.com/goray-dev/goray/backend"
)

// Datasets are the datasets of a run by name, as RunConfig.Datasets: Ray
// Train's datasets={"train": ds}. Each worker reads its own shard of each
// with [DatasetShard].
type Datasets map[string]Dataset

// Dataset is a dataset given to a run, made by [Data] or [EpochData]. The
// driver runs it, once per epoch, and deals its rows to the workers; its
// plan (sources, operators, closures) never leaves the driver.
type Dataset interface {
	// rowType names the rows' Go type, which a worker's DatasetShard must
	// ask for.
	rowType() string
	// open starts one epoch's run, after skipping its first skip rows, split
	// into world shards.
	open(ctx context.Context, name string, epoch int, skip int64, world int) (epochRun, error)
}

// DataOption configures a dataset of a run; see [KeepRemainder] and
// [SplitOptions].
type DataOption interface{ apply(*dataOptions) }

type dataOptions struct {
	keepRemainder bool
	run           []data.Option
}

type dataOptionFunc func(*dataOptions)

func (f dataOptionFunc) apply(o *dataOptions) { f(o) }

// KeepRemainder keeps every row of each epoch: of total rows and n
// workers, the first total mod n ranks get one row more than the others.
// Without it the shards are equal, as with Ray's default
// streaming_split(n, equal=True): each worker gets total/n rows (rounded
// down) and the last total mod n rows of the epoch are dropped, so that
// workers that take a step together run out together.
func KeepRemainder() DataOption {
	return dataOptionFunc(func(o *dataOptions) { o.keepRemainder = true })
}

// SplitOptions are options of each epoch's run of the dataset in the
// driver, as given to a sink of package data: data.MaxRowsInFlight,
// data.BlockRows, data.SkipBadRows, data.CollectStats (the last epoch's),
// data.Progress (off by default, since the run shows its own). Do not pass
// data.Unordered: resuming mid-epoch relies on an ordered run (see
// [DatasetShard]).
func SplitOptions(opts ...data.Option) DataOption {
	return dataOptionFunc(func(o *dataOptions) { o.run = append(o.run, opts...) })
}

// Data attaches d to a run: every epoch runs d again, in the driver, and
// deals its rows round robin to the run's workers (data.Split), equal
// shares unless [KeepRemainder].
func Data[T any](d *data.Dataset[T], opts ...DataOption) Dataset {
	if d == nil {
		return &dataset[T]{err: errors.New("train.Data: the dataset is nil")}
	}
	return EpochData(func(int) *data.Dataset[T] { return d }, opts...)
}

// EpochData attaches a dataset that may differ by epoch, such as one
// shuffled with a seed of the epoch: build(epoch) is called in the driver
// when the first worker starts reading that epoch (0, 1, ...). For a
// resumed run to re-read an epoch's rows, build must give the same rows
// in the same order for the same epoch every time.
func EpochData[T any](build func(epoch int) *data.Dataset[T], opts ...DataOption) Dataset {
	d := &dataset[T]{build: build}
	if build == nil {
		d.err = errors.New("train.EpochData: the build function is nil")
	}
	for _, o := range opts {
		o.apply(&d.opts)
	}
	return d
}

// dataset is a Dataset of rows of type T.
type dataset[T any] struct {
	build func(epoch int) *data.Dataset[T]
	opts  dataOptions
	err   error // a bad argument, reported by New
}

func rowTypeOf[T any]() string { return reflect.TypeFor[T]().String() }

func (d *dataset[T]) rowType() string { return rowTypeOf[T]() }

func (d *dataset[T]) open(ctx context.Context, name string, epoch int, skip int64, world int) (epochRun, error) {
	ds := d.build(epoch)
	if ds == nil {
		return nil, fmt.Errorf("train: dataset %q: the build function gave a nil dataset for epoch %d", name, epoch)
	}
	if skip > 0 {
		ds = data.Skip(ds, skip)
	}
	opts := append([]data.Option{data.Progress(false)}, d.opts.run...)
	if !d.opts.keepRemainder {
		opts = append(opts, data.Equal())
	}
	s, err := data.Split(ctx, ds, world, opts...)
	if err != nil {
		return nil, fmt.Errorf("train: dataset %q epoch %d: %w", name, epoch, err)
	}
	return &splitRun[T]{s: s, name: name, epoch: epoch}, nil
}

// checkDatasets checks a run's datasets.
func checkDatasets(sets Datasets) error {
	for name, d := range sets {
		switch {
		case name == "":
			return errors.New("train: RunConfig.Datasets has an empty name")
		case d == nil:
			return fmt.Errorf("train: RunConfig.Datasets[%q] is nil; make it with train.Data or train.EpochData", name)
		}
		if e, ok := d.(interface{ badArg() error }); ok {
			if err := e.badArg(); err != nil {
				return fmt.Errorf("train: RunConfig.Datasets[%q]: %w", name, err)
			}
		}
	}
	return nil
}

func (d *dataset[T]) badArg() error { return d.err }

// datasetNames lists names for error messages: "train", "eval".
func datasetNames[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none (set RunConfig.Datasets)"
	}
	names := slices.Sorted(maps.Keys(m))
	for i, n := range names {
		names[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(names, ", ")
}

// DatasetPosition is where every rank of a run was in one dataset when a
// checkpoint was taken, as recorded by their reports: Epochs[rank] is the
// epoch the rank was reading (or was to read next, when between epochs)
// and Rows[rank] the rows of that epoch its shard had yielded. A run
// resumed from the checkpoint starts each rank's shard there.
type DatasetPosition struct {
	Epochs []int   `json:"epochs"`
	Rows   []int64 `json:"rows"`
}

// shardPos is one rank's position in a dataset.
type shardPos struct {
	Epoch int   `json:"epoch"`
	Rows  int64 `json:"rows,omitempty"`
}

// shardInput is what a worker's task input says about a dataset: its
// rows' type and where this rank starts.
type shardInput struct {
	RowType string `json:"row_type"`
	Start   shardPos
}

// startPositions returns where each rank starts in each dataset when the
// run resumes from ck (nil: at epoch 0). A checkpoint taken with another
// number of workers can be resumed only from an epoch boundary.
func startPositions(sets Datasets, ck *Checkpoint, world int) (map[string][]shardPos, error) {
	out := make(map[string][]shardPos, len(sets))
	for name := range sets {
		start := make([]shardPos, world)
		out[name] = start
		if ck == nil || ck.Datasets[name] == nil {
			continue
		}
		p := ck.Datasets[name]
		if len(p.Epochs) != len(p.Rows) || len(p.Epochs) == 0 {
			return nil, fmt.Errorf("checkpoint %d: the position in dataset %q is corrupt (%d epochs, %d row counts)", ck.Iteration, name, len(p.Epochs), len(p.Rows))
		}
		if len(p.Epochs) == world {
			for r := range start {
				start[r] = shardPos{Epoch: p.Epochs[r], Rows: p.Rows[r]}
			}
			continue
		}
		// Another number of workers: the shards' rows differ, so only a
		// position every rank reached together, the start of an epoch,
		// carries over.
		e := p.Epochs[0]
		for r := range p.Epochs {
			if p.Epochs[r] != e || p.Rows[r] != 0 {
				return nil, fmt.Errorf("checkpoint %d was taken mid-epoch in dataset %q by %d workers (epochs %v, rows %v), and this run has %d: resume it with %d workers, or from a checkpoint taken between epochs",
					ck.Iteration, name, len(p.Epochs), p.Epochs, p.Rows, world, len(p.Epochs))
			}
		}
		for r := range start {
			start[r] = shardPos{Epoch: e}
		}
	}
	return out, nil
}

// shardState is a worker's position in one dataset.
type shardState struct {
	name    string
	rowType string
	mu      sync.Mutex
	pos     shardPos // the epoch read (active) or to read next, and its rows consumed
	active  bool
	err     error // a failed epoch: the dataset cannot be read again in this attempt
}

func (s *shardState) position() shardPos {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

// ShardPosition returns where this worker is in the dataset name: the
// epoch it is reading, or, between epochs, the epoch its next
// [DatasetShard] range reads, and the rows of that epoch its shard has
// yielded. A fresh run starts at (0, 0); a resumed one where the
// checkpoint's report left this rank. A loop that runs a number of epochs
// starts counting from this epoch.
func (w *Worker) ShardPosition(name string) (epoch int, rows int64, err error) {
	if w == nil || w.in == nil {
		return 0, 0, backend.Errorf(backend.InvalidArgument, "", "train: ShardPosition(%q): no worker; call it in a training loop, with the loop's *train.Worker", name)
	}
	s := w.shards[name]
	if s == nil {
		return 0, 0, backend.Errorf(backend.NotFound, "", "train: ShardPosition(%q): run %s has no dataset %q; its datasets: %s", name, w.in.Run, name, datasetNames(w.shards))
	}
	p := s.position()
	return p.Epoch, p.Rows, nil
}

// positions are the worker's positions in every dataset, for a report.
func (w *Worker) positions() map[string]shardPos {
	if len(w.shards) == 0 {
		return nil
	}
	out := make(map[string]shardPos, len(w.shards))
	for name, s := range w.shards {
		out[name] = s.position()
	}
	return out
}

// DatasetShard returns this worker's shard of the run's dataset name
// (RunConfig.Datasets), Ray Train's get_dataset_shard: ranging over it
// reads one epoch of the shard, and each range reads the next epoch.
// Iteration ends after the shard's last row of the epoch, or after one
// final (zero, err) pair: the dataset's run failed, the run was aborted
// (a *WorkerFailedError), ctx was cancelled, or the request was bad (a
// name the run lacks, a row type that is not the dataset's, a worker
// whose loop has returned, a range while another of the same dataset is
// under way). T must be the dataset's row type. Rows cross from the
// driver with encoding/gob, as data's spill files do: exported fields
// only, a GobEncoder or BinaryMarshaler is honoured, and pointers are
// flattened (a nil pointer in a slice fails the epoch, naming the type).
//
// Shards: in each epoch, rank i of n gets rows i, i+n, i+2n, ... of the
// dataset (data.Split). Every worker must range over the same epochs
// (breaking out early is fine: the rest of that epoch's shard is
// dropped); a worker that stops reading holds the others back once a few
// blocks are queued for it, since the driver buffers a bounded amount per
// worker. A worker whose loop returned gives up its shards.
//
// Resuming: a row counts as consumed once the iterator has yielded it, and
// [Worker.Report] records each rank's (epoch, rows consumed) with its
// report, into the checkpoint. A run resumed from that checkpoint starts
// each rank at its epoch and skips the rows it had consumed, so within an
// epoch no row is seen twice or lost, provided the dataset gives the same
// rows in the same order every time (an ordered run of a deterministic
// dataset, with the same options) and the run has the same number of
// workers; with another number, only a checkpoint taken between epochs
// can be resumed. Report after the step that used the rows, not before.
func DatasetShard[T any](ctx context.Context, w *Worker, name string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		s, err := w.beginShard(name, rowTypeOf[T]())
		if err != nil {
			yield(zero, err)
			return
		}
		epoch := s.position().Epoch
		var failed error
		defer func() { w.endShard(s, failed) }()
		fail := func(err error) {
			failed = err
			yield(zero, err)
		}
		conn, br, stop, err := w.dialShard(ctx, name, epoch, s.rowType)
		if err != nil {
			fail(err)
			return
		}
		defer stop()
		var src bytes.Buffer // the current frame, for the connection's gob stream
		dec := gob.NewDecoder(&src)
		for {
			op, payload, err := readFrame(br, maxShardFrame)
			if err != nil {
				fail(w.shardConnErr(ctx, name, epoch, err))
				return
			}
			switch op {
			case opShardRows:
				src.Reset()
				src.Write(payload)
				var rows []T
				if err := dec.Decode(&rows); err != nil {
					fail(backend.Errorf(backend.InvalidArgument, "", "train: dataset %q epoch %d: decode rows of type %s with encoding/gob: %w", name, epoch, s.rowType, err))
					return
				}
				for _, row := range rows {
					s.mu.Lock()
					s.pos.Rows++
					s.mu.Unlock()
					if !yield(row, nil) {
						return
					}
				}
				// The frame is consumed: one more may come. A connection
				// that broke fails the next read, after the frames
				// already received.
				writeFrame(conn, opShardCredit, 0, nil) //nolint:errcheck // see above
			case opShardEnd:
				if len(payload) > 0 {
					fail(withCode(backend.TaskFailed, errors.New(string(payload))))
				}
				return
			default:
				fail(backend.Errorf(backend.Internal, "", "train: dataset %q epoch %d: the driver sent a %s frame", name, epoch, op))
				return
			}
		}
	}
}

// beginShard checks a DatasetShard request and marks the dataset read.
func (w *Worker) beginShard(name, rowType string) (*shardState, error) {
	if w == nil || w.in == nil {
		return nil, backend.Errorf(backend.InvalidArgument, "", "train: DatasetShard(%q): no worker; call it in a training loop, with the loop's *train.Worker", name)
	}
	if w.done.Load() {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: DatasetShard(%q): the loop of rank %d has returned; read shards during the loop call", name, w.in.Rank)
	}
	s := w.shards[name]
	if s == nil {
		return nil, backend.Errorf(backend.NotFound, "", "train: DatasetShard(%q): run %s has no dataset %q; its datasets: %s", name, w.in.Run, name, datasetNames(w.shards))
	}
	if s.rowType != rowType {
		return nil, backend.Errorf(backend.InvalidArgument, "", "train: DatasetShard[%s](%q): the dataset's rows are %s; ask for DatasetShard[%s]", rowType, name, s.rowType, s.rowType)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return nil, withCode(backend.TaskFailed, fmt.Errorf("train: DatasetShard(%q): epoch %d failed in this attempt: %w", name, s.pos.Epoch, s.err))
	case s.active:
		return nil, backend.Errorf(backend.FailedPrecondition, "", "train: DatasetShard(%q): rank %d is already reading epoch %d; one range at a time per dataset", name, w.in.Rank, s.pos.Epoch)
	}
	s.active = true
	return s, nil
}

// endShard ends a range: after a failure the position stays where it
// is; otherwise the next range reads the next epoch.
func (w *Worker) endShard(s *shardState, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active = false
	if err != nil {
		s.err = err
		return
	}
	s.pos = shardPos{Epoch: s.pos.Epoch + 1}
}

// maxShardFrame bounds a rows frame a worker accepts.
const maxShardFrame = 1 << 30

// shardWindow is how many rows frames the driver may send that the worker
// has not consumed yet: the one it consumes and one more.
const shardWindow = 2

// shardOpen is the first frame of a shard connection.
type shardOpen struct {
	Token   string `json:"token"`
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"`
	Dataset string `json:"dataset"`
	Epoch   int    `json:"epoch"`
	RowType string `json:"row_type"`
	Window  int    `json:"window"`
}

// dialShard opens a shard connection to the rendezvous; stop closes it.
// The connection is closed as soon as ctx is done or the run aborts.
func (w *Worker) dialShard(ctx context.Context, name string, epoch int, rowType string) (net.Conn, *bufio.Reader, func(), error) {
	d := net.Dialer{Timeout: rendezvousDialTimeout}
	c, err := d.DialContext(ctx, "tcp", w.in.Rendezvous)
	if err != nil {
		return nil, nil, nil, w.shardConnErr(ctx, name, epoch, err)
	}
	w.connMu.Lock()
	if w.conns == nil {
		w.conns = map[net.Conn]bool{}
	}
	w.conns[c] = true
	aborted := w.sess.abortedErr() != nil
	w.connMu.Unlock()
	stopCtx := context.AfterFunc(ctx, func() { c.Close() })
	stop := func() {
		stopCtx()
		c.Close()
		w.connMu.Lock()
		delete(w.conns, c)
		w.connMu.Unlock()
	}
	if aborted {
		stop()
		return nil, nil, nil, w.sess.abortedErr()
	}
	open, _ := json.Marshal(shardOpen{Token: w.in.Token, Attempt: w.in.Attempt, Rank: w.in.Rank, Dataset: name, Epoch: epoch, RowType: rowType, Window: shardWindow})
	if err := writeFrame(c, opShardOpen, 0, open); err != nil {
		stop()
		return nil, nil, nil, w.shardConnErr(ctx, name, epoch, err)
	}
	return c, bufio.NewReaderSize(c, 64<<10), stop, nil
}

// closeShardConns closes every open shard connection (the run aborted).
func (w *Worker) closeShardConns() {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	for c := range w.conns {
		c.Close()
	}
}

// shardConnErr says why a shard connection failed: the context, the
// run's abort, or the connection itself.
func (w *Worker) shardConnErr(ctx context.Context, name string, epoch int, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if aerr := w.sess.abortedErr(); aerr != nil {
		return aerr
	}
	return withCode(backend.Unavailable, fmt.Errorf("train: dataset %q epoch %d: the connection to the driver broke: %w", name, epoch, err))
}
