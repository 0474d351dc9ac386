package train_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/train"
)

type shardCfg struct {
	Epochs   int
	StepRows int // a step (an AllReduce and a report with checkpoint) every StepRows rows
	// In attempt 0, rank FailRank fails after FailAfter rows of epoch
	// FailEpoch (FailRank < 0: never).
	FailRank, FailEpoch, FailAfter int
}

// shardState is what a rank of shardReader saves in its checkpoint: the
// rows it has seen, by epoch.
type shardState struct {
	Seen map[int][]int `json:"seen"`
}

// shardReader reads its shard of "train" for cfg.Epochs epochs, taking a
// step every cfg.StepRows rows and at the end of every epoch: an
// AllReduce (so the workers go in lockstep, as training does) and a
// report whose checkpoint holds every row this rank has seen. A resumed
// rank starts from its checkpoint's rows and its shard's position.
var shardReader = train.NewLoop("train_test.shards", func(ctx context.Context, w *train.Worker, cfg shardCfg) error {
	st := shardState{Seen: map[int][]int{}}
	if b, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
	}
	step := func() error {
		xs := []float64{1}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		b, _ := json.Marshal(st)
		return w.Report(ctx, train.Metrics{"workers": xs[0]}, b)
	}
	epoch, _, err := w.ShardPosition("train")
	if err != nil {
		return err
	}
	for ; epoch < cfg.Epochs; epoch++ {
		_, n, _ := w.ShardPosition("train") // rows already consumed of this epoch (resumed)
		for row, err := range train.DatasetShard[int](ctx, w, "train") {
			if err != nil {
				return err
			}
			st.Seen[epoch] = append(st.Seen[epoch], row)
			n++
			if w.Attempt() == 0 && w.Rank() == cfg.FailRank && epoch == cfg.FailEpoch && n == int64(cfg.FailAfter) {
				return errors.New("injected failure")
			}
			if n%int64(cfg.StepRows) == 0 {
				if err := step(); err != nil {
					return err
				}
			}
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
})

// seenRows loads every rank's rows of the final checkpoint.
func seenRows(t *testing.T, res *train.Result, world int) []map[int][]int {
	t.Helper()
	out := make([]map[int][]int, world)
	for r := range world {
		b, err := res.Checkpoint.Load(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		var st shardState
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		out[r] = st.Seen
	}
	return out
}

// checkShards checks that in every epoch rank r saw exactly rows r, r+n,
// r+2n, ... of 0..total-1 (all of them, or total/n each with the
// remainder dropped), so every row once across the ranks.
func checkShards(t *testing.T, seen []map[int][]int, epochs, total int, keep bool) {
	t.Helper()
	n := len(seen)
	for e := range epochs {
		all := map[int]int{}
		for r := range n {
			var want []int
			for k := 0; ; k++ {
				row := k*n + r
				if row >= total || (!keep && k >= total/n) {
					break
				}
				want = append(want, row)
			}
			if got := seen[r][e]; !slices.Equal(got, want) {
				t.Fatalf("epoch %d rank %d saw %d rows %v..., want %d rows %v...", e, r, len(got), head(got), len(want), head(want))
			}
			for _, row := range seen[r][e] {
				all[row]++
			}
		}
		want := total
		if !keep {
			want = total / n * n
		}
		if len(all) != want {
			t.Fatalf("epoch %d: %d distinct rows seen, want %d", e, len(all), want)
		}
		for row, c := range all {
			if c != 1 {
				t.Fatalf("epoch %d: row %d seen %d times", e, row, c)
			}
		}
	}
}

func head(xs []int) []int { return xs[:min(len(xs), 6)] }

// TestDatasetShardEveryRowOnce: 8 workers (two v6e 4x4 slices) read 1003
// rows for 2 epochs in lockstep: every row once per epoch, rank r gets
// rows r, r+8, ...; equal shares drop the last 3 rows, KeepRemainder
// gives ranks 0-2 one more; in process and in worker processes.
func TestDatasetShardEveryRowOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keep  bool
		procs bool
	}{
		{"equal", false, false},
		{"keep remainder", true, false},
		{"equal, worker processes", false, true},
		{"keep remainder, worker processes", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 2, tc.procs)
			bucket := storage.NewMem()
			defer bucket.Close()
			const total, epochs = 1003, 2
			var opts []train.DataOption
			if tc.keep {
				opts = append(opts, train.KeepRemainder())
			}
			tr, err := train.New(c, shardReader, shardCfg{Epochs: epochs, StepRows: 10, FailRank: -1},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
				train.RunConfig{Progress: train.ProgressOff, Bucket: bucket,
					Datasets: train.Datasets{"train": train.Data(data.Range(total), opts...)}})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.NoErr(err)
			is.Equal(res.Metrics["workers"], 8.0)
			checkShards(t, seenRows(t, res, 8), epochs, total, tc.keep)
			pos := res.Checkpoint.Datasets["train"]
			is.Equal(pos.Epochs, []int{2, 2, 2, 2, 2, 2, 2, 2}) // every rank finished epoch 1: next is 2
			is.Equal(pos.Rows, make([]int64, 8))
			assertReleased(t, c)
		})
	}
}

// TestDatasetShardResume: rank 3 fails mid-epoch 1 (after 57 of its rows,
// past the checkpoint of its 50th); the run resumes from the latest
// checkpoint, each rank's shard skips the rows that rank had consumed,
// and over the two attempts every row of every epoch is seen exactly
// once (each rank's checkpoint holds the rows it had seen at that
// report, so the rows seen after it in attempt 0 do not count).
func TestDatasetShardResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		keep  bool
		procs bool
	}{
		{"equal", false, false},
		{"keep remainder", true, false},
		{"equal, worker processes", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			_, c := newCluster(t, "4x4", 2, tc.procs)
			bucket := storage.NewMem()
			defer bucket.Close()
			const total, epochs = 1003, 3
			var opts []train.DataOption
			if tc.keep {
				opts = append(opts, train.KeepRemainder())
			}
			var mu sync.Mutex
			var failures []train.Failure
			tr, err := train.New(c, shardReader, shardCfg{Epochs: epochs, StepRows: 10, FailRank: 3, FailEpoch: 1, FailAfter: 57},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2},
				train.RunConfig{Progress: train.ProgressOff, Bucket: bucket, MaxFailures: 1, KeepCheckpoints: -1,
					OnFailure: func(f train.Failure) { mu.Lock(); failures = append(failures, f); mu.Unlock() },
					Datasets:  train.Datasets{"train": train.Data(data.Range(total), opts...)}})
			is.NoErr(err)
			res, err := tr.Fit(context.Background())
			is.NoErr(err)
			is.Equal(res.Attempts, 2)
			is.Equal(len(res.Failures), 1)
			is.True(strings.Contains(res.Failures[0].Cause, "injected failure"))
			// The resumed checkpoint was mid-epoch 1: 13 steps per epoch
			// (12 of 10 rows and one at its end), so rank 3's 50th row of
			// epoch 1 is iteration 13+5.
			resumed := res.Failures[0].ResumeFrom
			is.True(resumed >= 13+1 && resumed <= 13+5)
			var ck *train.Checkpoint
			for _, c := range res.Checkpoints {
				if c.Iteration == resumed {
					ck = c
				}
			}
			is.True(ck != nil)
			pos := ck.Datasets["train"]
			t.Logf("resumed from checkpoint %d: epochs %v, rows %v", resumed, pos.Epochs, pos.Rows)
			is.Equal(pos.Epochs[3], 1)
			is.Equal(pos.Rows[3], int64((resumed-13)*10)) // mid-epoch: rows consumed at that report
			checkShards(t, seenRows(t, res, 8), epochs, total, tc.keep)
			assertReleased(t, c)
		})
	}
}

// TestDatasetShardV7xProcesses: on v7x with a worker per TPU process (two
// per host), two slices of 2x2x2 make 8 workers, and the dataset is split
// 8 ways: the run's worker count decides the shards.
func TestDatasetShardV7xProcesses(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v7x", Topology: "2x2x2", Count: 2}}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	defer c.Close()
	bucket := storage.NewMem()
	defer bucket.Close()
	tr, err := train.New(c, shardReader, shardCfg{Epochs: 1, StepRows: 7, FailRank: -1},
		train.ScalingConfig{AcceleratorVersion: "v7x", Topology: "2x2x2", NumSlices: 2, ResourcesPerWorker: ray.Resources{ray.TPU: 2}},
		train.RunConfig{Progress: train.ProgressOff, Bucket: bucket, Datasets: train.Datasets{"train": train.Data(data.Range(100), train.KeepRemainder())}})
	is.NoErr(err)
	is.Equal(tr.NumWorkers(), 8)
	res, err := tr.Fit(context.Background())
	is.NoErr(err)
	checkShards(t, seenRows(t, res, 8), 1, 100, true)
}

// epochSum reads every epoch of two datasets, "train" built per epoch
// (rows epoch*1000+i) and "eval", and reports per epoch the sum of the
// rows all ranks read, through an AllReduce.
var epochSum = train.NewLoop("train_test.epochsum", func(ctx context.Context, w *train.Worker, epochs int) error {
	for epoch := range epochs {
		var sum [2]float64
		for row, err := range train.DatasetShard[int](ctx, w, "train") {
			if err != nil {
				return err
			}
			if row/1000 != epoch {
				return fmt.Errorf("epoch %d: row %d of another epoch", epoch, row)
			}
			sum[0] += float64(row)
		}
		for row, err := range train.DatasetShard[string](ctx, w, "eval") {
			if err != nil {
				return err
			}
			n, _ := strconv.Atoi(row)
			sum[1] += float64(n)
		}
		if err := train.AllReduce(ctx, w, sum[:], train.Sum); err != nil {
			return err
		}
		if err := w.Report(ctx, train.Metrics{"train": sum[0], "eval": sum[1]}, nil); err != nil {
			return err
		}
	}
	return nil
})

// TestEpochData: EpochData builds each epoch's dataset from its number;
// two datasets are read side by side.
func TestEpochData(t *testing.T) {
	is := is.New(t)
	_, c := newCluster(t, "4x4", 1, false)
	var sums []train.Metrics
	eval := make([]string, 10)
	for i := range eval {
		eval[i] = strconv.Itoa(i)
	}
	tr, err := train.New(c, epochSum, 3,
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Progress: train.ProgressOff, OnReport: func(r train.Report) { sums = append(sums, r.Metrics) },
			Datasets: train.Datasets{
				"train": train.EpochData(func(epoch int) *data.Dataset[int] {
					return data.Map(data.Range(100), func(_ context.Context, i int) (int, error) { return epoch*1000 + i, nil })
				}),
				"eval": train.Data(data.FromItems(eval), train.KeepRemainder()),
			}})
	is.NoErr(err)
	_, err = tr.Fit(context.Background())
	is.NoErr(err)
	is.Equal(len(sums), 3)
	for e, m := range sums {
		is.Equal(m["train"], float64(e*1000*100+99*100/2)) // all 100 rows (100 = 4 × 25)
		is.Equal(m["eval"], 45.0)                          // all 10, with KeepRemainder
	}
}

// slowStarted is set when rank 1 of TestDatasetShardBackpressure starts
// reading; fastRows counts rank 0's rows before that.
var (
	slowStarted atomic.Bool
	fastRows    atomic.Int64
)

var backpressure = train.NewLoop("train_test.backpressure", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	if w.Rank() == 1 {
		time.Sleep(time.Second) // rank 1 reads nothing for a second
		slowStarted.Store(true)
	}
	n := 0
	for _, err := range train.DatasetShard[int](ctx, w, "train") {
		if err != nil {
			return err
		}
		if w.Rank() == 0 && !slowStarted.Load() {
			fastRows.Add(1)
		}
		if n++; n == 20000 {
			break // enough: the rest of the shard is dropped
		}
	}
	return nil
})

// TestDatasetShardBackpressure: rank 1 of 4 does not read for a second
// while rank 0 reads as fast as it can from a dataset of 10M rows: rank
// 0 gets only as far ahead as the rows held for rank 1 (data.Split's
// MaxRowsInFlight, 1000 here, plus a few frames in flight), not the
// whole dataset: the driver does not buffer for a slow worker. Breaking
// out of the range early ends the run without reading the rest.
func TestDatasetShardBackpressure(t *testing.T) {
	is := is.New(t)
	_, c := newCluster(t, "4x4", 1, false)
	slowStarted.Store(false)
	fastRows.Store(0)
	var stats data.Stats
	tr, err := train.New(c, backpressure, struct{}{},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": train.Data(data.Range(10_000_000),
			train.SplitOptions(data.MaxRowsInFlight(1000), data.CollectStats(&stats)))}})
	is.NoErr(err)
	start := time.Now()
	_, err = tr.Fit(context.Background())
	is.NoErr(err)
	ahead := fastRows.Load()
	t.Logf("rank 0 read %d rows while rank 1 read none; the run took %v; split stats: %d rows out, peak %d in flight",
		ahead, time.Since(start).Round(time.Millisecond), stats.Rows, peak(stats))
	is.True(ahead > 0)
	// Rank 0 gets at most what is dealt to rank 1 unread, and as much
	// again: Split's rows in flight (1000 in all) and, per shard, a
	// frame's rows held by the driver and 2 frames sent (256 rows each).
	is.True(ahead <= 2*(1000+3*256))
}

func peak(s data.Stats) int64 {
	var p int64
	for _, o := range s.Operators {
		p = max(p, o.PeakRowsInFlight)
	}
	return p
}

// TestDatasetShardCancel: cancelling Fit while the workers read a big
// dataset (one slowly) stops the dataset's run and the workers; no
// goroutine is left once the cluster is closed.
func TestDatasetShardCancel(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(map[bool]string{false: "in process", true: "worker processes"}[procs], func(t *testing.T) {
			is := is.New(t)
			before := goleak.IgnoreCurrent()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, c := newCluster(t, "4x4", 1, procs)
			tr, err := train.New(c, shardReader, shardCfg{Epochs: 1000, StepRows: 100, FailRank: -1},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
				train.RunConfig{Progress: train.ProgressOff, OnReport: func(r train.Report) {
					if r.Iteration == 20 {
						cancel()
					}
				}, Datasets: train.Datasets{"train": train.Data(data.Range(100_000_000))}})
			is.NoErr(err)
			_, err = tr.Fit(ctx)
			is.Equal(err, context.Canceled)
			assertReleased(t, c)
			is.NoErr(c.Close())
			goleak.VerifyNone(t, before)
		})
	}
}

// lateWorker keeps the worker of rank 0 after its loop returns.
var lateWorker atomic.Pointer[train.Worker]

var badShards = train.NewLoop("train_test.badshards", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	var errs []string
	for _, err := range train.DatasetShard[int](ctx, w, "trian") {
		errs = append(errs, fmt.Sprint(err))
	}
	for _, err := range train.DatasetShard[string](ctx, w, "train") {
		errs = append(errs, fmt.Sprint(err))
	}
	for _, err := range train.DatasetShard[int](ctx, nil, "train") {
		errs = append(errs, fmt.Sprint(err))
	}
	_, _, err := w.ShardPosition("eval")
	errs = append(errs, fmt.Sprint(err))
	// A range inside a range of the same dataset.
	for _, err := range train.DatasetShard[int](ctx, w, "train") {
		for _, err2 := range train.DatasetShard[int](ctx, w, "train") {
			errs = append(errs, fmt.Sprint(err2))
			break
		}
		if err != nil {
			return err
		}
		break
	}
	if w.Rank() == 0 {
		lateWorker.Store(w)
		return w.Report(ctx, nil, []byte(strings.Join(errs, "\n")))
	}
	return w.Report(ctx, nil, nil)
})

// TestDatasetShardBadInput: a name the run lacks, a row type that is not
// the dataset's, no worker, a second range of a dataset under way, a
// worker whose loop has returned, datasets for an external program and a
// nil dataset all give errors that say what is valid.
func TestDatasetShardBadInput(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	_, c := newCluster(t, "4x4", 1, false)
	bucket := storage.NewMem()
	defer bucket.Close()
	sets := train.Datasets{"train": train.Data(data.Range(100)), "extra": train.Data(data.FromItems([]string{"a"}))}
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	tr, err := train.New(c, badShards, struct{}{}, scaling, train.RunConfig{Name: "bad", Progress: train.ProgressOff, Bucket: bucket, Datasets: sets})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	b, err := res.Checkpoint.Load(ctx, 0)
	is.NoErr(err)
	errs := strings.Split(string(b), "\n")
	for _, e := range errs {
		t.Log(e)
	}
	is.Equal(len(errs), 5)
	is.Equal(errs[0], `train: DatasetShard("trian"): run bad has no dataset "trian"; its datasets: "extra", "train"`)
	is.Equal(errs[1], `train: DatasetShard[string]("train"): the dataset's rows are int; ask for DatasetShard[int]`)
	is.Equal(errs[2], `train: DatasetShard("train"): no worker; call it in a training loop, with the loop's *train.Worker`)
	is.Equal(errs[3], `train: ShardPosition("eval"): run bad has no dataset "eval"; its datasets: "extra", "train"`)
	is.Equal(errs[4], `train: DatasetShard("train"): rank 0 is already reading epoch 0; one range at a time per dataset`)

	// After the loop returned.
	for _, err := range train.DatasetShard[int](ctx, lateWorker.Load(), "train") {
		is.Equal(err.Error(), `train: DatasetShard("train"): the loop of rank 0 has returned; read shards during the loop call`)
	}

	_, err = train.NewProgram(c, train.Program{Path: "python3"}, scaling, train.RunConfig{Datasets: sets})
	t.Log(err)
	is.True(strings.Contains(err.Error(), `RunConfig.Datasets ("extra", "train") are read by Go loops`))
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	_, err = train.New(c, badShards, struct{}{}, scaling, train.RunConfig{Datasets: train.Datasets{"train": nil}})
	is.Equal(err.Error(), `train: RunConfig.Datasets["train"] is nil; make it with train.Data or train.EpochData`)
	_, err = train.New(c, badShards, struct{}{}, scaling, train.RunConfig{Datasets: train.Datasets{"train": train.Data[int](nil)}})
	is.Equal(err.Error(), `train: RunConfig.Datasets["train"]: train.Data: the dataset is nil`)
}

// resumeReader reads its shard of "train" from where its checkpoint left
// it to the end of epoch cfg.Epochs-1, without collectives, and reports
// once, with every row it has seen.
var resumeReader = train.NewLoop("train_test.resumereader", func(ctx context.Context, w *train.Worker, cfg shardCfg) error {
	st := shardState{Seen: map[int][]int{}}
	if b, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
	}
	epoch, _, err := w.ShardPosition("train")
	if err != nil {
		return err
	}
	for ; epoch < cfg.Epochs; epoch++ {
		for row, err := range train.DatasetShard[int](ctx, w, "train") {
			if err != nil {
				return err
			}
			st.Seen[epoch] = append(st.Seen[epoch], row)
		}
	}
	b, _ := json.Marshal(st)
	return w.Report(ctx, nil, b)
})

// writeCheckpoint stores a complete checkpoint of run as Fit does
// (docs/train.md: <run>/checkpoint_<iteration>/rank_<rank> and COMPLETE),
// with rank r's rows seen[r] and the given positions in "train".
func writeCheckpoint(t *testing.T, b storage.Bucket, run string, it int, seen []map[int][]int, pos *train.DatasetPosition) {
	t.Helper()
	ctx := context.Background()
	dir := fmt.Sprintf("%s/checkpoint_%09d/", run, it)
	ck := train.Checkpoint{Iteration: it, Time: time.Now(), Datasets: map[string]*train.DatasetPosition{"train": pos}}
	for r, s := range seen {
		data, _ := json.Marshal(shardState{Seen: s})
		if err := storage.WriteAll(ctx, b, fmt.Sprintf("%srank_%05d", dir, r), data); err != nil {
			t.Fatal(err)
		}
		ck.Ranks = append(ck.Ranks, r)
	}
	marker, _ := json.Marshal(ck)
	if err := storage.WriteAll(ctx, b, dir+"COMPLETE", marker); err != nil {
		t.Fatal(err)
	}
}

// shardRows are the rows of shard r of n of 0..total-1 (KeepRemainder).
func shardRows(total, n, r int) []int {
	var out []int
	for row := r; row < total; row += n {
		out = append(out, row)
	}
	return out
}

// TestDatasetShardResumeFromPositions: a run resumes from a checkpoint
// whose ranks stood at different places: rank 0 had read all 26 rows of
// its epoch-0 shard but was still in the range, rank 1 was between
// epochs 0 and 1, rank 2 had read 10 rows of epoch 0 and rank 3 5 rows of
// epoch 1. Each rank reads exactly the rest: every row of both epochs
// once in all. A checkpoint of 8 workers resumes on 4 between epochs, and
// mid-epoch it is refused, saying why.
func TestDatasetShardResumeFromPositions(t *testing.T) {
	ctx := context.Background()
	const total = 103 // shards of 26, 26, 26 and 25 rows
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	run := func(t *testing.T, c *ray.Cluster, b storage.Bucket) (*train.Result, error) {
		tr, err := train.New(c, resumeReader, shardCfg{Epochs: 2}, scaling, train.RunConfig{Name: "resumed", Progress: train.ProgressOff, Bucket: b,
			Datasets: train.Datasets{"train": train.Data(data.Range(total), train.KeepRemainder())}})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Fit(ctx)
	}

	t.Run("mixed positions", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		b := storage.NewMem()
		defer b.Close()
		seen := []map[int][]int{
			{0: shardRows(total, 4, 0)},
			{0: shardRows(total, 4, 1)},
			{0: shardRows(total, 4, 2)[:10]},
			{0: shardRows(total, 4, 3), 1: shardRows(total, 4, 3)[:5]},
		}
		writeCheckpoint(t, b, "resumed", 7, seen, &train.DatasetPosition{Epochs: []int{0, 1, 0, 1}, Rows: []int64{26, 0, 10, 5}})
		res, err := run(t, c, b)
		is.NoErr(err)
		is.Equal(res.Iteration, 8)
		checkShards(t, seenRows(t, res, 4), 2, total, true)
	})

	t.Run("8 workers to 4 between epochs", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		b := storage.NewMem()
		defer b.Close()
		// Epoch 0 as 4 ranks would have read it; the positions of 8.
		seen := make([]map[int][]int, 4)
		for r := range seen {
			seen[r] = map[int][]int{0: shardRows(total, 4, r)}
		}
		writeCheckpoint(t, b, "resumed", 3, seen, &train.DatasetPosition{Epochs: []int{1, 1, 1, 1, 1, 1, 1, 1}, Rows: make([]int64, 8)})
		res, err := run(t, c, b)
		is.NoErr(err)
		checkShards(t, seenRows(t, res, 4), 2, total, true)
	})

	t.Run("8 workers to 4 mid-epoch", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		b := storage.NewMem()
		defer b.Close()
		writeCheckpoint(t, b, "resumed", 3, make([]map[int][]int, 4), &train.DatasetPosition{Epochs: []int{0, 0, 0, 0, 0, 0, 0, 0}, Rows: []int64{3, 3, 3, 3, 3, 3, 3, 3}})
		_, err := run(t, c, b)
		t.Log(err)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), `checkpoint 3 was taken mid-epoch in dataset "train" by 8 workers (epochs [0 0 0 0 0 0 0 0], rows [3 3 3 3 3 3 3 3]), and this run has 4: resume it with 8 workers, or from a checkpoint taken between epochs`))
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		assertReleased(t, c)
	})
}

// opaque has no exported field: gob cannot carry it.
type opaque struct{ n int }

var readOpaque = train.NewLoop("train_test.opaque", func(ctx context.Context, w *train.Worker, _ struct{}) error {
	for _, err := range train.DatasetShard[opaque](ctx, w, "train") {
		if err != nil {
			return err
		}
	}
	return nil
})

// TestDatasetShardFailures: a row the dataset's run fails on and rows the
// transport cannot encode fail the run, naming the dataset, the epoch and
// the cause.
func TestDatasetShardFailures(t *testing.T) {
	ctx := context.Background()
	scaling := train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"}
	t.Run("a bad row", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		bad := data.Map(data.Range(100), func(_ context.Context, i int) (int, error) {
			if i == 57 {
				return 0, errors.New("row 57 is bad")
			}
			return i, nil
		})
		tr, err := train.New(c, resumeReader, shardCfg{Epochs: 1}, scaling,
			train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": train.Data(bad)}})
		is.NoErr(err)
		_, err = tr.Fit(ctx)
		t.Log(err)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), `train: dataset "train" epoch 0: `))
		is.True(strings.Contains(err.Error(), "row 57 is bad"))
		assertReleased(t, c)
	})
	t.Run("rows gob cannot encode", func(t *testing.T) {
		is := is.New(t)
		_, c := newCluster(t, "4x4", 1, false)
		tr, err := train.New(c, readOpaque, struct{}{}, scaling,
			train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": train.Data(data.FromItems(make([]opaque, 10)), train.KeepRemainder())}})
		is.NoErr(err)
		_, err = tr.Fit(ctx)
		t.Log(err)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), `train: dataset "train" epoch 0: encode rows of type train_test.opaque with encoding/gob: gob: type train_test.opaque has no exported fields`))
		assertReleased(t, c)
	})
}

// leaverRows counts the rows ranks 1-3 of TestDatasetShardRankLeaves read.
var leaverRows atomic.Int64

var leaver = train.NewLoop("train_test.leaver", func(ctx context.Context, w *train.Worker, epochs int) error {
	if w.Rank() == 0 {
		return nil // reads nothing and returns at once
	}
	for range epochs {
		for _, err := range train.DatasetShard[int](ctx, w, "train") {
			if err != nil {
				return err
			}
			leaverRows.Add(1)
		}
	}
	return nil
})

// TestDatasetShardRankLeaves: a rank whose loop returns without reading
// gives up its shards of every epoch, started or not, so the others read
// theirs to the end instead of waiting for it once its queue is full.
func TestDatasetShardRankLeaves(t *testing.T) {
	is := is.New(t)
	_, c := newCluster(t, "4x4", 1, false)
	leaverRows.Store(0)
	tr, err := train.New(c, leaver, 3, train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4"},
		train.RunConfig{Progress: train.ProgressOff, Datasets: train.Datasets{"train": train.Data(data.Range(20_000),
			train.SplitOptions(data.MaxRowsInFlight(100)))}})
	is.NoErr(err)
	_, err = tr.Fit(context.Background())
	is.NoErr(err)
	is.Equal(leaverRows.Load(), int64(3*3*5000)) // 3 epochs of 3 shards of 5000
}
