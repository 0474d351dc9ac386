package train

import (
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/tpu"
)

// ScalingConfig says what the run runs on: whole TPU slices of one
// generation and topology. The number of workers is derived: one per host
// of every slice (or one per TPU process, see ResourcesPerWorker). The zero value is incomplete: AcceleratorVersion and
// Topology are required.
type ScalingConfig struct {
	// AcceleratorVersion is the TPU generation: "v6e", "TPU-V6E", "v5p",
	// "tpu7x", ...
	AcceleratorVersion string
	// Topology is the chip grid of each slice, such as "4x4".
	Topology string
	// NumSlices is the number of slices (multislice over DCN when more than
	// 1); 0 means 1.
	NumSlices int
	// ChipsPerHost overrides the chips per host for ambiguous shapes such
	// as v6e 2x4 (Ray's chips_per_vm); 0 means the generation's default.
	ChipsPerHost int
	// NumWorkers, if not 0, is checked against the derived worker count
	// (hosts per slice times NumSlices); it is never used to compute it.
	NumWorkers int
	// ResourcesPerWorker are each worker's resources. A worker holds a
	// whole host: TPU defaults to the host's chips; CPU defaults to 1. On
	// a host that runs several TPU processes (a v7x host: two, each on
	// its NUMA node's 2 chips, tpu.SliceShape.ProcessesPerHost), TPU set
	// to the chips of one process runs one worker per process instead,
	// each with its own TPU_WORKER_ID and TPU_PROCESS_PORT.
	ResourcesPerWorker ray.Resources
	// ReserveTimeout bounds each wait for free slices, at the start and
	// after every failure; 0 means 5 minutes. A reservation that fails
	// with Unavailable (the cluster's control plane does not answer, as
	// during a Kubernetes API server outage) is asked again within it.
	ReserveTimeout time.Duration

	// MinSlices, when between 1 and NumSlices - 1, makes the run elastic
	// (Ray Train's ScalingConfig(num_workers=(min, max))): NumSlices is
	// the most slices it runs on and MinSlices the fewest. Each attempt
	// asks for NumSlices; when they cannot be had within ElasticWait it
	// settles for one fewer, and so on down to MinSlices (whose wait is
	// ReserveTimeout). The workers, their ranks and every env
	// (TPU_WORKER_HOSTNAMES, MEGASCALE_NUM_SLICES, the world size) come
	// from the reservation the attempt got, and the loop resumes from the
	// latest checkpoint: a loop that shards its data by Rank and
	// WorldSize trains on what is left. 0 means NumSlices (not elastic).
	MinSlices int
	// ElasticWait bounds the wait for more slices than MinSlices at each
	// attempt of an elastic run; 0 means 1 minute.
	ElasticWait time.Duration
	// GrowAtCheckpoint lets an elastic run that holds fewer than
	// NumSlices grow at a checkpoint: after the attempt's first complete
	// checkpoint the driver asks for the missing slices (a reservation,
	// which on a backend with capacity on demand asks the cluster for
	// them) and waits for them while the attempt runs; once it holds
	// them, at the next complete checkpoint it stops the attempt and
	// restarts from that checkpoint on NumSlices (a restart that is not a
	// failure). Without it, a run grows only at its next restart.
	GrowAtCheckpoint bool
}

// Progress says how a run shows its progress.
type Progress int

const (
	// ProgressAuto draws a live progress line on ProgressOutput when it is
	// a terminal and logs one slog line per report otherwise.
	ProgressAuto Progress = iota
	// ProgressOff shows nothing.
	ProgressOff
	// ProgressBar always draws the live line.
	ProgressBar
	// ProgressLog always logs slog lines.
	ProgressLog
)

// RunConfig names a run and says where its checkpoints go, how failures are
// handled and how progress is shown. The zero value is a run named "train"
// with in-memory checkpoints, no restarts and automatic progress.
type RunConfig struct {
	// Name names the run and its checkpoint directory; letters, digits,
	// '.', '_' and '-'. Empty means "train".
	Name string
	// Storage is the URL of the checkpoint bucket, opened with
	// storage.Open: "file:///path" (or the plain absolute path "/path")
	// and "mem://" are built in;
	// "gs://bucket", "s3://bucket" and "azblob://container" work after
	// importing github.com/goray-dev/goray/storage/gocloud and the
	// gocloud.dev driver. Empty means "mem://", which lives as long as the
	// Fit call. Checkpoints are written by the driver, so only the
	// driver needs access. A run whose storage already holds complete
	// checkpoints under its name resumes from the latest.
	Storage string
	// Bucket, if set, is used instead of Storage (and not closed).
	Bucket storage.Bucket
	// KeepCheckpoints is how many complete checkpoints are kept; 0 means
	// 3, negative keeps all.
	KeepCheckpoints int
	// MaxFailures is how many failed attempts are restarted from the latest
	// checkpoint on fresh slices; negative restarts forever. The default
	// 0 fails the run on its first failure.
	MaxFailures int
	// Progress says how progress is shown; ProgressOutput receives it (nil
	// means os.Stderr) and Logger receives the log lines (nil means a text
	// handler on ProgressOutput).
	Progress       Progress
	ProgressOutput io.Writer
	// TotalIterations, if known, sizes the progress bar.
	TotalIterations int
	// ProgressInterval is the least time between two log lines of
	// ProgressLog (the first report of each attempt, the last report and
	// failures are always logged); 0 means 1s, negative logs every report.
	ProgressInterval time.Duration
	// ProgressLogger, if set, receives the ProgressLog lines instead of a
	// text handler on ProgressOutput.
	ProgressLogger *slog.Logger
	// Logger receives debug logs of the trainer; nil discards them.
	Logger *slog.Logger
	// Output receives the output of external programs, each line
	// prefixed with "[rank N] "; nil means os.Stdout.
	Output io.Writer
	// OnReport, if set, is called in the driver with each of rank 0's
	// reports, one at a time; rank 0's Report waits for it.
	OnReport func(Report)
	// OnFailure, if set, is called in the driver with each failed attempt
	// as soon as it is known, before the run restarts or gives up (the
	// same values end up in Result.Failures).
	OnFailure func(Failure)
	// Rendezvous is the address the driver listens on for its workers;
	// empty means a port of the host the backend says every worker can
	// reach (ray.DriverHost: 127.0.0.1 on the simulator, the driver pod's
	// IP on Kubernetes). A driver outside the cluster sets it to an
	// address worker pods can reach (the train fails at once, saying so,
	// when the backend knows none).
	Rendezvous string
	// FailureVerdict bounds how long a worker whose peer connection broke
	// waits for the driver to name the failed rank before naming the
	// peer; 0 means 10s.
	FailureVerdict time.Duration
	// StartTimeout bounds the wait for every worker of an attempt to start
	// and join; a worker that does not (its host died before its task
	// ran) fails the attempt. 0 means 5 minutes.
	StartTimeout time.Duration
	// StopGrace bounds the wait for workers to stop after the run ends or
	// fails; 0 means 10s.
	StopGrace time.Duration
	// ProfilerPort, if set, gives each rank a profiler port in its env
	// (ProfilerPortEnv: ProfilerPort + rank) and each report the ranks'
	// addresses (Report.Profilers), which the dashboard lists; 0 means
	// none.
	ProfilerPort int
	// Datasets are datasets the workers read, each its own shard, with
	// DatasetShard (Ray Train's datasets= and get_dataset_shard). They run
	// in the driver, once per epoch, and reach the workers through the
	// rendezvous; see DatasetShard for the shares and resuming.
	Datasets Datasets
}

// Report is one of rank 0's reports, as passed to RunConfig.OnReport.
type Report struct {
	Attempt   int
	Iteration int
	Metrics   Metrics
	// Slices are the names of the attempt's reserved slices, for tests
	// that inject failures.
	Slices []string
	// Checkpoint is true when rank 0 saved data with the report.
	Checkpoint bool
	// Profilers are each rank's profiler address, host:port, when
	// RunConfig.ProfilerPort is set.
	Profilers []string
}

var runName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// plan is a validated configuration.
type plan struct {
	shape          tpu.SliceShape
	numSlices      int
	hostsPerSlice  int
	procsPerHost   int // workers per host: 1, or the shape's TPU processes
	workers        int
	resources      ray.Resources
	reserveTimeout time.Duration
	minSlices      int // = numSlices unless elastic
	elasticWait    time.Duration
	grow           bool
}

// elastic reports whether the run may run on fewer slices than numSlices.
func (p *plan) elastic() bool { return p.minSlices < p.numSlices }

func (s ScalingConfig) plan() (*plan, error) {
	if s.AcceleratorVersion == "" || s.Topology == "" {
		return nil, fmt.Errorf("train: ScalingConfig needs AcceleratorVersion (such as \"v6e\") and Topology (such as \"4x4\")")
	}
	shape, err := tpu.NewSliceShape(tpu.Generation(s.AcceleratorVersion), s.Topology, s.ChipsPerHost)
	if err != nil {
		return nil, fmt.Errorf("train: ScalingConfig: %w", err)
	}
	if s.NumSlices < 0 {
		return nil, fmt.Errorf("train: ScalingConfig: NumSlices %d is negative; use 1 or more (0 means 1)", s.NumSlices)
	}
	p := &plan{shape: shape, numSlices: max(s.NumSlices, 1), hostsPerSlice: shape.Hosts(), procsPerHost: 1, reserveTimeout: s.ReserveTimeout}
	chips := float64(shape.ChipsPerHost)
	if shape.ChipsPerHost == 0 {
		chips = float64(shape.Generation.DefaultChipsPerHost(shape.Topology))
	}
	perWorker := chips
	if v, ok := s.ResourcesPerWorker[ray.TPU]; ok && v != chips {
		if pph := shape.ProcessesPerHost(); pph > 1 && v == float64(shape.ChipsPerProcess()) {
			p.procsPerHost, perWorker = pph, v
		} else if pph > 1 {
			return nil, fmt.Errorf("train: ScalingConfig: ResourcesPerWorker asks for %v TPU chips; a worker holds a whole %s host (%v chips, the default) or one of its %d TPU processes (%d chips)", v, shape, chips, pph, shape.ChipsPerProcess())
		} else {
			return nil, fmt.Errorf("train: ScalingConfig: ResourcesPerWorker asks for %v TPU chips, but a worker holds a whole %s host, which has %v; leave TPU unset", v, shape, chips)
		}
	}
	p.workers = p.hostsPerSlice * p.procsPerHost * p.numSlices
	switch {
	case s.MinSlices < 0 || s.MinSlices > p.numSlices:
		return nil, fmt.Errorf("train: ScalingConfig: MinSlices %d is not between 1 and NumSlices (%d); 0 means NumSlices (not elastic)", s.MinSlices, p.numSlices)
	case s.MinSlices == 0:
		p.minSlices = p.numSlices
	default:
		p.minSlices = s.MinSlices
	}
	if s.ElasticWait < 0 {
		return nil, fmt.Errorf("train: ScalingConfig: ElasticWait %v is negative", s.ElasticWait)
	}
	p.elasticWait = s.ElasticWait
	if p.elasticWait == 0 {
		p.elasticWait = time.Minute
	}
	if (s.GrowAtCheckpoint || s.ElasticWait != 0) && !p.elastic() {
		return nil, fmt.Errorf("train: ScalingConfig: GrowAtCheckpoint and ElasticWait apply to an elastic run: set MinSlices below NumSlices (%d)", p.numSlices)
	}
	p.grow = s.GrowAtCheckpoint
	if s.NumWorkers != 0 && s.NumWorkers != p.workers {
		per := "one per host"
		if p.procsPerHost > 1 {
			per = fmt.Sprintf("%d per host", p.procsPerHost)
		}
		return nil, fmt.Errorf("train: ScalingConfig: NumWorkers is %d, but %d × %s (%d hosts of %v chips each) means %d workers, %s; leave NumWorkers 0 to derive it",
			s.NumWorkers, p.numSlices, shape, p.hostsPerSlice, chips, p.workers, per)
	}
	p.resources = ray.Resources{ray.CPU: 1, ray.TPU: perWorker}
	for k, v := range s.ResourcesPerWorker {
		if k == ray.TPU {
			continue // checked above
		}
		if v < 0 {
			return nil, fmt.Errorf("train: ScalingConfig: ResourcesPerWorker[%q] is negative (%v)", k, v)
		}
		p.resources[k] = v
	}
	if p.reserveTimeout <= 0 {
		p.reserveTimeout = 5 * time.Minute
	}
	return p, nil
}

func (r RunConfig) withDefaults() (RunConfig, error) {
	if r.Name == "" {
		r.Name = "train"
	}
	if !runName.MatchString(r.Name) {
		return r, fmt.Errorf("train: RunConfig.Name %q: use letters, digits, '.', '_' and '-'", r.Name)
	}
	if r.Storage == "" {
		r.Storage = "mem://"
	}
	if r.KeepCheckpoints == 0 {
		r.KeepCheckpoints = 3
	}
	if r.Progress < ProgressAuto || r.Progress > ProgressLog {
		return r, fmt.Errorf("train: RunConfig.Progress %d: use ProgressAuto, ProgressOff, ProgressBar or ProgressLog", r.Progress)
	}
	if r.FailureVerdict <= 0 {
		r.FailureVerdict = 10 * time.Second
	}
	if r.StartTimeout <= 0 {
		r.StartTimeout = 5 * time.Minute
	}
	if r.StopGrace <= 0 {
		r.StopGrace = 10 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkDatasets(r.Datasets); err != nil {
		return r, err
	}
	return r, nil
}
