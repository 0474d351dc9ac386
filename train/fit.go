package train

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/storage"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// Trainer runs a training loop (or an external program) on every host of
// whole TPU slices, restarting it from its latest checkpoint on fresh
// slices after a failure. Create it with [New] or [NewProgram]; its zero
// value is not usable. A *Trainer is safe for concurrent use, and each Fit
// is a separate run.
type Trainer struct {
	c       *ray.Cluster
	scaling ScalingConfig
	plan    *plan
	run     RunConfig
	loop    string
	config  json.RawMessage
	program *Program
}

// New returns a trainer that runs loop with cfg on every worker. It fails
// with an error naming the problem for a bad configuration, such as a
// topology the generation lacks or a NumWorkers the topology contradicts.
func New[C any](c *ray.Cluster, loop *Loop[C], cfg C, scaling ScalingConfig, run RunConfig) (*Trainer, error) {
	if loop == nil {
		return nil, invalid(errors.New("train.New: nil loop"))
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, invalid(fmt.Errorf("train.New: encode the %T configuration: %w", cfg, err))
	}
	return newTrainer(c, scaling, run, func(t *Trainer) { t.loop, t.config = loop.name, raw })
}

// NewProgram returns a trainer that runs prog, an external program such
// as a Python script with JAX, on every host of the slices as its own
// process, with the host's TPU env and the rendezvous's address.
func NewProgram(c *ray.Cluster, prog Program, scaling ScalingConfig, run RunConfig) (*Trainer, error) {
	if prog.Path == "" {
		return nil, invalid(errors.New("train.NewProgram: Program.Path is empty: name the program to run, such as \"python3\""))
	}
	if len(run.Datasets) > 0 {
		return nil, invalid(fmt.Errorf("train.NewProgram: RunConfig.Datasets (%s) are read by Go loops, with train.DatasetShard; an external program cannot read them: use train.New", datasetNames(run.Datasets)))
	}
	return newTrainer(c, scaling, run, func(t *Trainer) { t.program = &prog })
}

// invalid gives a configuration error the code InvalidArgument
// (ray.CodeOf), keeping its message.
func invalid(err error) error {
	if ray.CodeOf(err) != ray.Unknown {
		return err
	}
	return &backend.Error{Code: backend.InvalidArgument, Err: err}
}

func newTrainer(c *ray.Cluster, scaling ScalingConfig, run RunConfig, set func(*Trainer)) (*Trainer, error) {
	if c == nil {
		return nil, invalid(errors.New("train: nil cluster"))
	}
	p, err := scaling.plan()
	if err != nil {
		return nil, invalid(err)
	}
	run, err = run.withDefaults()
	if err == nil {
		err = checkProfilerPort(run.ProfilerPort, p.workers)
	}
	if err != nil {
		return nil, invalid(err)
	}
	t := &Trainer{c: c, scaling: scaling, plan: p, run: run}
	set(t)
	return t, nil
}

// NumWorkers returns the derived number of workers: one per host of every
// slice.
func (t *Trainer) NumWorkers() int { return t.plan.workers }

// Failure is one failed attempt.
type Failure struct {
	// Attempt is the attempt that failed.
	Attempt int
	// Rank is the worker that failed first, and Host and Slice are where
	// it ran; when a host was lost (Unavailable), they name the worker of
	// the lost host, whichever worker reported first.
	Rank        int
	Host, Slice string
	// Cause says why, and Err is the task's error when the failure came
	// from one (read its code with ray.CodeOf: Unavailable for a lost host).
	Cause string
	Err   error
	// ResumeFrom is the iteration of the checkpoint the next attempt
	// resumes from (0: from scratch).
	ResumeFrom int
	Time       time.Time

	code backend.Code // of Cause, when Err is nil
	grow bool         // not a failure: the attempt stopped to grow
}

// Result is what a run produced.
type Result struct {
	// Metrics are rank 0's last reported metrics, at Iteration.
	Metrics   Metrics
	Iteration int
	// Checkpoint is the latest complete checkpoint (nil if none), and
	// Checkpoints are all kept ones, oldest first.
	Checkpoint  *Checkpoint
	Checkpoints []*Checkpoint
	// Failures is the failure history, oldest first; Attempts counts
	// every attempt, including the last.
	Failures []Failure
	Attempts int
	// SlicesPerAttempt is the number of slices each attempt ran on:
	// ScalingConfig.NumSlices every time, unless the run is elastic
	// (ScalingConfig.MinSlices).
	SlicesPerAttempt []int
	// AlreadyFinished is set when the run had finished before this Fit
	// (a run of the same name in the same storage, with the same loop or
	// program and configuration, had returned without error): Fit
	// started no worker and returns that run's final Iteration, Metrics
	// and checkpoints, with Attempts 0. A run started again with another
	// configuration (more iterations, say) trains on from its latest
	// checkpoint instead.
	AlreadyFinished bool
}

// Fit runs the training: it reserves the slices (waiting up to
// ReserveTimeout), starts one worker per host with that host's env, and
// waits for every worker's loop to return. When a worker fails (its loop
// returns an error, its host dies, its slice is preempted), every other
// worker's collectives fail at once, the slices are released, fresh ones
// are reserved and every worker restarts from the latest complete
// checkpoint, up to MaxFailures times. Fit releases everything it reserved
// on every path, and returns the result so far with any error.
func (t *Trainer) Fit(ctx context.Context) (*Result, error) {
	res, err := t.fit(ctx)
	// What has no code yet is a failure of train itself.
	return res, withCode(backend.Internal, err)
}

func (t *Trainer) fit(ctx context.Context) (*Result, error) {
	st, closeStore, err := t.openStore(ctx)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	if t.program != nil {
		// Directories programs staged and never committed (a program that
		// failed between writing and reporting) go with the run, passed
		// or failed.
		defer st.clearStaging(context.WithoutCancel(ctx)) //nolint:errcheck // best effort: the next run's first attempt clears them too
	}
	prog := newProgress(t.run)
	defer prog.finish()
	sink := &reportSink{progress: prog, onReport: t.run.OnReport}
	res := &Result{}
	digest := t.digest()
	switch fin, err := st.finished(ctx); {
	case err != nil:
		return nil, err
	case fin != nil && fin.Config == digest:
		res.AlreadyFinished, res.Iteration, res.Metrics = true, fin.Iteration, fin.Metrics
		t.run.Logger.Info("train: the run had finished; returning its final result without training",
			"run", t.run.Name, "iteration", fin.Iteration, "finished_at", fin.Time, "marker", st.prefix+finishedName)
		prog.alreadyFinished(fin.Iteration, fin.Metrics, fin.Time)
		return res, t.finishResult(ctx, st, res)
	case fin != nil:
		// Another configuration continues the run: it is no longer
		// finished until it ends again.
		if err := st.clearFinished(ctx); err != nil {
			return nil, err
		}
	}
	resume, err := st.latest(ctx)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		res.Attempts = attempt + 1
		f, err := t.attempt(ctx, attempt, st, resume, sink, res)
		if last := sink.lastReport(); last != nil {
			res.Metrics, res.Iteration = last.Metrics, last.Iteration
		}
		if f == nil && err == nil {
			break
		}
		if err != nil { // not a worker failure: the run cannot go on
			t.finishResult(ctx, st, res) //nolint:errcheck // err says more
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, err
		}
		if resume, err = st.latest(ctx); err != nil {
			return res, err
		}
		if resume != nil {
			f.ResumeFrom = resume.Iteration
		}
		if f.grow { // not a failure: more slices are free
			t.run.Logger.Info("train: restarting on more slices", "run", t.run.Name, "attempt", attempt+1, "resume_from", f.ResumeFrom, "cause", f.Cause)
			continue
		}
		res.Failures = append(res.Failures, *f)
		if t.run.OnFailure != nil {
			t.run.OnFailure(*f)
		}
		if t.run.MaxFailures >= 0 && len(res.Failures) > t.run.MaxFailures {
			t.finishResult(ctx, st, res) //nolint:errcheck // the failure says more
			var cause error = &causeError{msg: f.Cause, err: f.Err}
			if f.Err == nil {
				cause = &backend.Error{Code: f.code, Err: errors.New(f.Cause)}
			}
			return res, fmt.Errorf("train: run %s: attempt %d failed (%d failures, MaxFailures %d): rank %d on %s: %w",
				t.run.Name, attempt, len(res.Failures), t.run.MaxFailures, f.Rank, f.Host, cause)
		}
		prog.failure(*f)
		t.run.Logger.Info("train: restarting", "run", t.run.Name, "attempt", attempt+1, "resume_from", f.ResumeFrom)
	}
	if err := t.finishResult(ctx, st, res); err != nil {
		return res, err
	}
	if res.Iteration == 0 && res.Checkpoint != nil {
		// No worker reported (the loop had nothing left to do): the run
		// stands where its latest checkpoint is.
		res.Iteration, res.Metrics = res.Checkpoint.Iteration, res.Checkpoint.Metrics
	}
	return res, st.setFinished(ctx, &finishedMarker{Iteration: res.Iteration, Metrics: res.Metrics, Attempts: res.Attempts, Time: time.Now(), Config: digest})
}

// digest identifies the run's loop (or program) and configuration: a
// finished run started again with the same digest returns its result.
func (t *Trainer) digest() string {
	b, _ := json.Marshal(struct { //nolint:errcheck // plain values
		Loop    string          `json:"loop,omitempty"`
		Config  json.RawMessage `json:"config,omitempty"`
		Program *Program        `json:"program,omitempty"`
	}{t.loop, t.config, t.program})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// workerCause is what a worker task's error says about the worker: the
// loop's own message (one line, "loop x panicked: ..." for a panic),
// without the internal task's name and attempt, which mean nothing to
// the run's user.
func workerCause(err error) string {
	var te *ray.TaskError
	if errors.As(err, &te) {
		return te.Message
	}
	return err.Error()
}

// causeError is a failure's cause as the run reports it: the failure's
// one-line message, wrapping the task's error (errors.As reaches its
// *ray.TaskError and, for a panic, its Stack).
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

func (t *Trainer) finishResult(ctx context.Context, st *store, res *Result) error {
	cks, err := st.checkpoints(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	res.Checkpoints = cks
	if len(cks) > 0 {
		res.Checkpoint = cks[len(cks)-1]
	}
	return nil
}

func (t *Trainer) openStore(ctx context.Context) (*store, func(), error) {
	b, closeFn := t.run.Bucket, func() {}
	if b == nil {
		var err error
		if b, err = storage.Open(ctx, t.run.Storage); err != nil {
			return nil, nil, withCode(backend.InvalidArgument, fmt.Errorf("train: open checkpoint storage %q: %w", t.run.Storage, err))
		}
	}
	st := &store{b: b, prefix: t.run.Name + "/", keep: t.run.KeepCheckpoints}
	if t.run.Bucket == nil {
		st.root, st.base = storageLocation(t.run.Storage)
		st.url = t.run.Storage
		closeFn = func() {
			st.closed.Store(true)
			b.Close()
		}
	}
	return st, closeFn, nil
}

// abortGrace is how long workers told of a failure get to return from their
// loops before their tasks are cancelled.
const abortGrace = time.Second

// lostRank returns the rank whose host is dead, from the cluster's slice
// states.
func (t *Trainer) lostRank(ctx context.Context, hosts []string) (int, bool) {
	states, err := ray.TPUSlices(context.WithoutCancel(ctx), t.c)
	if err != nil {
		return 0, false
	}
	dead := make(map[string]bool)
	for _, st := range states {
		for _, h := range st.Hosts {
			if !h.Alive {
				dead[h.Node] = true
			}
		}
	}
	for rank, h := range hosts {
		if dead[h] {
			return rank, true
		}
	}
	return 0, false
}

// attempt runs one attempt. It returns a Failure when a worker failed
// (the run may restart) and an error when it cannot go on.
func (t *Trainer) attempt(ctx context.Context, attempt int, st *store, resume *Checkpoint, sink *reportSink, res *Result) (*Failure, error) {
	p := t.plan
	var starts map[string][]shardPos
	var err error
	if !p.elastic() { // known before reserving: fail before holding anything
		if starts, err = startPositions(t.run.Datasets, resume, p.workers); err != nil {
			return nil, invalid(fmt.Errorf("train: run %s: %w", t.run.Name, err))
		}
	}
	spg, nSlices, err := t.reserve(ctx, attempt)
	if err != nil {
		return nil, err
	}
	defer spg.Release(context.WithoutCancel(ctx))
	res.SlicesPerAttempt = append(res.SlicesPerAttempt, nSlices)
	workers := nSlices * p.hostsPerSlice * p.procsPerHost
	if p.elastic() {
		if starts, err = startPositions(t.run.Datasets, resume, workers); err != nil {
			return nil, invalid(fmt.Errorf("train: run %s: %w", t.run.Name, err))
		}
	}
	if spg.NumProcesses() != workers || spg.BundlesPerHost() != p.procsPerHost {
		return nil, backend.Errorf(backend.Internal, "", "train: run %s: the reservation has %d processes and %d bundles per host; want %d processes, %d per host", t.run.Name, spg.NumProcesses(), spg.BundlesPerHost(), workers, p.procsPerHost)
	}
	token := make([]byte, 16)
	rand.Read(token) //nolint:errcheck // crypto/rand.Read never fails
	out := t.run.Output
	if out == nil {
		out = os.Stdout
	}
	addr := t.run.Rendezvous
	if addr == "" {
		host, err := ray.DriverHost(ctx, t.c)
		if err != nil {
			return nil, fmt.Errorf("train: run %s: where should the workers reach the driver? Set RunConfig.Rendezvous: %w", t.run.Name, err)
		}
		addr = net.JoinHostPort(host, "0")
	}
	var feed func(*sync.WaitGroup) *feeder
	if len(t.run.Datasets) > 0 {
		feed = func(wg *sync.WaitGroup) *feeder {
			return newFeeder(ctx, hex.EncodeToString(token), attempt, workers, t.run.Datasets, starts, wg)
		}
	}
	if t.program != nil {
		// Staged checkpoint directories of the last attempt's programs
		// were never committed: none of them runs now.
		if err := st.clearStaging(ctx); err != nil {
			return nil, err
		}
	}
	rz, err := newRendezvous(addr, hex.EncodeToString(token), attempt, workers, st, spg.SliceNames(), t.run.FailureVerdict, sink, &lineSink{w: out}, feed,
		runInfo{run: t.run.Name, resume: resume, perSlice: p.hostsPerSlice * p.procsPerHost, numSlices: nSlices, log: t.run.Logger,
			profilers: profilerAddrs(ctx, t.c, spg, workers, t.run.ProfilerPort)})
	if err != nil {
		return nil, err
	}
	// hosts[rank] is the host rank runs on.
	hosts, sliceNames := make([]string, 0, workers), spg.SliceNames()
	for _, h := range spg.Hosts() {
		for range p.procsPerHost {
			hosts = append(hosts, h)
		}
	}
	perSlice := p.hostsPerSlice * p.procsPerHost
	t.run.Logger.Debug("train: attempt starts", "run", t.run.Name, "attempt", attempt, "slices", sliceNames, "resume", resume != nil)
	if p.grow && nSlices < p.numSlices {
		g := &grower{t: t, ctx: ctx, attempt: attempt, have: nSlices, rz: rz}
		defer g.stop()
		rz.onCommit = g.checkpoint
	}

	var wg sync.WaitGroup
	var okMu sync.Mutex
	ok := 0
	allOK := make(chan struct{})
	for i := range workers {
		in := workerInput{
			Run: t.run.Name, Loop: t.loop, Config: t.config, Program: t.program,
			Rendezvous: rz.addr(), Token: rz.token, Attempt: attempt,
			Rank: i, WorldSize: workers, SliceIndex: i / perSlice, NumSlices: nSlices,
			Env: profilerEnv(spg.WorkerEnv(i), t.run.ProfilerPort, i), Resume: resume, Verdict: t.run.FailureVerdict,
		}
		if len(t.run.Datasets) > 0 {
			in.Datasets = make(map[string]shardInput, len(t.run.Datasets))
			for name, d := range t.run.Datasets {
				in.Datasets[name] = shardInput{RowType: d.rowType(), Start: starts[name][i]}
			}
		}
		// Each rank is submitted from a goroutine of its own: on a backend
		// that runs a task before its submission returns (backend/fake),
		// rank 0 would otherwise wait at the rendezvous for ranks not
		// submitted yet.
		wg.Go(func() {
			ref := workerTask.Remote(ctx, t.c, in, ray.InBundle(spg.PlacementGroup(), i), ray.Retries(0), p.resources,
				ray.Name(fmt.Sprintf("%s/attempt-%d/rank-%d", t.run.Name, attempt, i)))
			if _, err := ref.Get(ctx); err != nil {
				rz.setFailure(i, workerCause(err), err, ray.CodeOf(err), false)
				return
			}
			okMu.Lock()
			defer okMu.Unlock()
			if ok++; ok == workers {
				close(allOK)
			}
		})
	}
	started := time.AfterFunc(t.run.StartTimeout, func() { rz.missing(t.run.StartTimeout) })
	defer started.Stop()
	select {
	case <-allOK:
	case <-rz.failed:
	case <-ctx.Done():
		rz.setFailure(-1, "the run was cancelled", nil, backend.Canceled, false)
	}
	// Every path: the workers were told of a failure (above); give them a
	// moment to return from their loops on their own, so that they see
	// the failure rather than a cancellation, then give the slices back,
	// which cancels the tasks, and wait for the workers.
	rz.stopAccepting()
	tasksDone := make(chan struct{})
	go func() { wg.Wait(); close(tasksDone) }()
	grace := min(abortGrace, t.run.StopGrace)
	deadline := time.Now().Add(grace)
	if rz.wait(grace) {
		// The workers hung up; their tasks' results (a panic's stack
		// among them) are on their way back from the worker processes:
		// wait for them in what is left of the grace.
		select {
		case <-tasksDone:
		case <-time.After(time.Until(deadline)):
		}
	}
	spg.Release(context.WithoutCancel(ctx)) //nolint:errcheck // releasing twice is a no-op; a failure here leaves nothing we could do
	wg.Wait()
	rz.close(t.run.StopGrace)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	f := rz.failure()
	if f == nil {
		return nil, nil
	}
	fl := &Failure{Attempt: attempt, Rank: f.rank, Cause: f.cause, Err: f.err, Time: time.Now(), code: f.code, grow: f.grow}
	if f.rank >= 0 && f.rank < len(hosts) {
		fl.Host, fl.Slice = hosts[f.rank], sliceNames[f.rank/perSlice]
	}
	if ray.CodeOf(f.err) == ray.Unavailable {
		// A lost host fails the work of every host of the reservation at
		// once, so the rank that reported first need not be the one whose
		// host died: name the dead host itself.
		if rank, ok := t.lostRank(ctx, hosts); ok {
			fl.Rank, fl.Host, fl.Slice = rank, hosts[rank], sliceNames[rank/perSlice]
		}
	}
	if code := ray.CodeOf(f.err); f.err != nil && !errors.Is(f.err, ray.ErrPlacementGroupRemoved) && (code == ray.InvalidArgument || code == ray.FailedPrecondition || code == ray.NotFound) {
		return nil, fmt.Errorf("train: run %s: rank %d cannot run: %w", t.run.Name, f.rank, f.err)
	}
	return fl, nil
}

// storageLocation returns the local directory of a file:// storage URL
// (or plain absolute path), or the URL of another storage that external
// programs can write, such as gs://bucket/runs; both empty for mem://.
func storageLocation(storageURL string) (root, base string) {
	if strings.HasPrefix(storageURL, "/") {
		return filepath.Clean(storageURL), ""
	}
	u, err := url.Parse(storageURL)
	switch {
	case err != nil || u.Scheme == "mem":
		return "", ""
	case u.Scheme == "file":
		return filepath.Clean(filepath.FromSlash(u.Path)), ""
	}
	return "", strings.TrimSuffix(storageURL, "/")
}

// reserve reserves the attempt's slices: NumSlices, or for an elastic run
// as many as it can get, waiting ElasticWait for each count above
// MinSlices and ReserveTimeout for MinSlices.
func (t *Trainer) reserve(ctx context.Context, attempt int) (*ray.SlicePlacementGroup, int, error) {
	p := t.plan
	for n := p.numSlices; ; n-- {
		timeout := p.reserveTimeout
		if n > p.minSlices {
			timeout = p.elasticWait
		}
		spg, err := t.reserveWaiting(ctx, ray.SliceSpec{
			Topology: p.shape.Topology.String(), AcceleratorVersion: p.shape.Generation.String(), ChipsPerVM: t.scaling.ChipsPerHost,
			NumSlices: n, ResourcesPerBundle: p.resources, Name: fmt.Sprintf("%s-attempt-%d", t.run.Name, attempt),
		}, timeout)
		if err == nil {
			if n < p.numSlices {
				t.run.Logger.Info("train: running on fewer slices", "run", t.run.Name, "attempt", attempt, "slices", n, "of", p.numSlices)
			}
			return spg, n, nil
		}
		code := ray.CodeOf(err)
		if n == p.minSlices || ctx.Err() != nil || (code != ray.DeadlineExceeded && code != ray.Infeasible && code != ray.ResourceExhausted) {
			return nil, 0, fmt.Errorf("train: run %s attempt %d: reserve %d × %s: %w", t.run.Name, attempt, n, p.shape, err)
		}
		t.run.Logger.Info("train: no slices within ElasticWait; asking for fewer", "run", t.run.Name, "attempt", attempt, "slices", n, "wait", timeout, "error", err)
	}
}

// reserveWaiting reserves spec's slices, waiting up to timeout. A
// reservation that fails with Unavailable (the cluster's control plane
// does not answer, as during a Kubernetes API server outage) is asked
// again, 100 ms later doubling to 2 s, until timeout has passed since the
// first: an attempt that restarts while the control plane is away waits
// for it as for free slices, instead of ending the run.
func (t *Trainer) reserveWaiting(ctx context.Context, spec ray.SliceSpec, timeout time.Duration) (*ray.SlicePlacementGroup, error) {
	deadline := time.Now().Add(timeout)
	pause := 100 * time.Millisecond
	for tries := 1; ; tries++ {
		spec.Timeout = time.Until(deadline)
		if spec.Timeout <= 0 {
			spec.Timeout = time.Millisecond
		}
		spg, err := ray.NewSlicePlacementGroup(ctx, t.c, spec)
		if err == nil || ray.CodeOf(err) != ray.Unavailable || errors.Is(err, ray.ErrClosed) || ctx.Err() != nil ||
			time.Until(deadline) < pause {
			if err != nil && tries > 1 {
				err = fmt.Errorf("%w (after %d tries over %v)", err, tries, (timeout - time.Until(deadline)).Round(time.Millisecond))
			}
			return spg, err
		}
		if tries == 1 {
			t.run.Logger.Info("train: the cluster could not reserve slices; asking again until ReserveTimeout",
				"run", t.run.Name, "reservation", spec.Name, "timeout", timeout, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// grower makes an elastic attempt that runs on fewer than NumSlices grow:
// after its first complete checkpoint it asks for the missing slices (a
// reservation that, on a backend with capacity on demand, asks the cluster
// for them) and waits for them as long as the attempt runs (a reservation
// that fails at once is asked again after a later checkpoint). Once it
// holds them, at the next complete checkpoint it gives them back and stops
// the attempt, which restarts from that checkpoint on NumSlices: no step
// is done twice. One such reservation at a time; the attempt's end
// cancels or releases it.
type grower struct {
	t       *Trainer
	ctx     context.Context
	attempt int
	have    int
	rz      *rendezvous

	mu      sync.Mutex
	probing bool
	stopped bool
	ready   *ray.SlicePlacementGroup // the missing slices, held
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func (g *grower) checkpoint(it int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	if g.ready != nil {
		g.ready.Release(context.WithoutCancel(g.ctx)) //nolint:errcheck // the next attempt reserves them all
		g.ready = nil
		g.stopped = true
		p := g.t.plan
		g.t.run.Logger.Info("train: growing", "run", g.t.run.Name, "attempt", g.attempt, "checkpoint", it, "from_slices", g.have, "to_slices", p.numSlices)
		g.rz.setGrow(fmt.Sprintf("the run grows from %d to %d slices at checkpoint %d", g.have, p.numSlices, it))
		return
	}
	if g.probing {
		return
	}
	g.probing = true
	ctx, cancel := context.WithCancel(g.ctx)
	g.cancel = cancel
	g.wg.Go(func() {
		defer cancel()
		p := g.t.plan
		missing := p.numSlices - g.have
		spg, err := ray.NewSlicePlacementGroup(ctx, g.t.c, ray.SliceSpec{
			Topology: p.shape.Topology.String(), AcceleratorVersion: p.shape.Generation.String(), ChipsPerVM: g.t.scaling.ChipsPerHost,
			NumSlices: missing, ResourcesPerBundle: p.resources, Name: fmt.Sprintf("%s-attempt-%d-grow", g.t.run.Name, g.attempt),
		}) // no Timeout: as long as the attempt runs
		g.mu.Lock()
		defer g.mu.Unlock()
		g.probing = false
		switch {
		case err != nil: // not yet: a later checkpoint asks again
		case g.stopped:
			spg.Release(context.WithoutCancel(ctx)) //nolint:errcheck // the attempt has ended
		default:
			g.ready = spg // held until the next checkpoint
		}
	})
}

// stop cancels a reservation in progress, releases one held, and waits.
func (g *grower) stop() {
	g.mu.Lock()
	g.stopped = true
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready != nil {
		g.ready.Release(context.WithoutCancel(g.ctx)) //nolint:errcheck // nothing else to do
		g.ready = nil
	}
}
