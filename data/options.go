package data

import (
	"log/slog"
	"runtime"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/storage"
)

// Option configures a run (passed to a sink such as [Rows] or [Count]), an
// operator (passed to [Map], [MapBatches], ...), or both. Options that make
// sense in both places ([MaxRowsInFlight], [MaxBytesInFlight],
// [Concurrency], [Unordered]) set the run's default when given to a sink
// and override it for one operator when given to an operator. Options of
// one operator ([BatchSize], [Name], [OnTasks]) and of sources
// ([BlockRows]) do nothing elsewhere; options of the run ([SkipBadRows],
// [Progress], [CollectStats], [Logger]) do nothing on an operator.
type Option interface{ apply(*config) }

type config struct {
	// per operator (run defaults when given to a sink)
	maxRows     int64 // rows in flight per operator
	maxBytes    int64 // estimated bytes in flight per operator; 0 is no cap
	concurrency int
	concSet     bool // Concurrency was given
	batchSize   int
	name        string
	compute     compute // nil is in the driver
	// per run
	unordered bool
	maxBad    int // bad rows skipped before the run fails; 0 fails on the first
	progress  progressMode
	stats     *Stats
	logger    *slog.Logger
	blockRows int
	maxLine   int   // longest line or CSV record a text source reads
	maxFile   int64 // largest file ReadBinaryFiles reads
	errs      []error
	// all-to-all operators (Sort, GroupBy, Join, ...) and Split
	memBudget  int64          // estimated bytes an all-to-all operator holds before it spills
	spill      storage.Bucket // where it spills; nil is a temporary directory
	descending bool
	equal      bool
}

type progressMode int

const (
	progressAuto progressMode = iota
	progressOff
	progressOn
)

func defaultConfig() config {
	return config{maxRows: 16384, concurrency: runtime.GOMAXPROCS(0), blockRows: 1024, maxLine: DefaultMaxLineBytes, maxFile: DefaultMaxFileBytes, memBudget: DefaultMemoryBudget}
}

func (c *config) with(opts []Option) *config {
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

func (c *config) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs[0]
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// invalid records a bad option; the run fails with it, coded
// InvalidArgument (errors.Is(err, ray.ErrInvalidArgument)).
func invalid(c *config, format string, args ...any) {
	c.errs = append(c.errs, backend.Errorf(backend.InvalidArgument, "", "data: "+format, args...))
}

// MaxRowsInFlight caps the rows an operator has admitted and not yet handed
// on: rows waiting in its queue, being processed, or finished but not yet
// taken by the next operator or the sink. When the cap is reached the
// operator stops taking input, so a slow consumer slows every producer
// upstream (backpressure). n must be at least 1 and at least the operator's
// batch size; the default is 16384. An operator admits a block larger than
// the room it has in pieces, and a source whose [BlockRows] exceeds its
// cap makes blocks of the cap's size.
func MaxRowsInFlight(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "MaxRowsInFlight(%d): must be at least 1", n)
			return
		}
		c.maxRows = int64(n)
	})
}

// DefaultMaxLineBytes is the longest line (JSON Lines) or record (CSV) a
// text source reads unless [MaxLineBytes] says otherwise.
const DefaultMaxLineBytes = 16 << 20

// MaxLineBytes caps the bytes of one line of a JSON Lines file or one
// record of a CSV file (default [DefaultMaxLineBytes], 16 MiB), so that a
// file without line breaks cannot make a source hold it whole. A longer
// JSON line is a bad row naming the file and line (see [SkipBadRows]); it
// is skipped without being held. A longer CSV record fails the run with a
// [SourceError] naming the file and line, as CSV cannot resynchronise
// inside a record. n must be at least 1.
func MaxLineBytes(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "MaxLineBytes(%d): must be at least 1", n)
			return
		}
		c.maxLine = n
	})
}

// MaxBytesInFlight caps the estimated bytes of the rows an operator holds,
// like [MaxRowsInFlight]. Sizes are estimated by walking each row's value
// (strings, slices, maps and structs; pointers are followed once), which
// costs time per row, so it is off (0) by default. A block whose estimate
// alone exceeds the cap is admitted when nothing else is held. n must be
// at least 0.
func MaxBytesInFlight(n int64) Option {
	return optionFunc(func(c *config) {
		if n < 0 {
			invalid(c, "MaxBytesInFlight(%d): must be 0 (no cap) or more", n)
			return
		}
		c.maxBytes = n
	})
}

// Concurrency sets how many blocks an operator processes at once: goroutines
// for functions run in the driver, tasks in flight for [OnTasks], and calls
// in flight for an actor pool (default: the pool's maximum size). The
// default is GOMAXPROCS, right for CPU-bound functions; raise it for
// functions that wait (I/O, remote calls). n must be at least 1.
func Concurrency(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "Concurrency(%d): must be at least 1", n)
			return
		}
		c.concurrency, c.concSet = n, true
	})
}

// BatchSize sets the rows per call of [MapBatches] and [ApplyBatches]: each
// call gets exactly n rows except the last, which gets the rest. n must be
// at least 1; without it, batches are the blocks as they come.
func BatchSize(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "BatchSize(%d): must be at least 1", n)
			return
		}
		c.batchSize = n
	})
}

// Name names an operator in errors, progress and [Stats].
func Name(s string) Option { return optionFunc(func(c *config) { c.name = s }) }

// BlockRows sets how many rows a source puts in each block (default 1024).
// Blocks are the unit that operators process in parallel and that the
// in-flight caps count.
func BlockRows(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			invalid(c, "BlockRows(%d): must be at least 1", n)
			return
		}
		c.blockRows = n
	})
}

// Unordered lets operators hand on blocks as they finish instead of in
// input order. It raises throughput when blocks take uneven time. Given to
// a sink, it applies to every operator and lets file sources read several
// files at once; given to one operator, to that operator.
func Unordered() Option { return optionFunc(func(c *config) { c.unordered = true }) }

// SkipBadRows makes a run skip rows that fail (a line that does not parse,
// a function that returns an error for a row) instead of failing, and
// report each in [Stats].BadRows. After max skipped rows, the next bad row
// fails the run anyway. max must be at least 0 (0 fails on the first bad
// row, the default).
func SkipBadRows(max int) Option {
	return optionFunc(func(c *config) {
		if max < 0 {
			invalid(c, "SkipBadRows(%d): must be 0 or more", max)
			return
		}
		c.maxBad = max
	})
}

// Progress turns the live progress line on stderr on or off. By default it
// is on when stderr is a terminal.
func Progress(on bool) Option {
	return optionFunc(func(c *config) {
		c.progress = progressOff
		if on {
			c.progress = progressOn
		}
	})
}

// CollectStats stores the run's statistics in *s when the run ends, on
// success and on failure.
func CollectStats(s *Stats) Option { return optionFunc(func(c *config) { c.stats = s }) }

// Logger sends debug logs of the run (pool scaling, slice reservations) to
// l; nil, the default, discards them.
func Logger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.logger = l }) }
