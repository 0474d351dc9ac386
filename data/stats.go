package data

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/samber/lo"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Stats describes a finished run. Get it with [CollectStats].
type Stats struct {
	// Elapsed is the run's wall time; Rows what the sink took.
	Elapsed time.Duration
	Rows    int64
	// Operators lists the source and each operator, in plan order.
	Operators []OpStats
	// BadRows lists the rows skipped under [SkipBadRows], in the order
	// they were met.
	BadRows []RowError
	// Err is the run's error, nil on success.
	Err error
}

// OpStats describes one operator (or source) of a run.
type OpStats struct {
	Name string
	// RowsIn were admitted, RowsOut produced, BadRows failed. For a
	// source, RowsIn counts every row read, decoded or bad, so RowsIn =
	// RowsOut + BadRows; for an operator, RowsIn counts the rows it took
	// from upstream (a one-to-one operator such as Map has RowsIn =
	// RowsOut + BadRows; Filter drops, FlatMap and batches reshape).
	RowsIn, RowsOut, BadRows int64
	// RowsPerSecond is RowsOut over the operator's running time.
	RowsPerSecond float64
	// RowsInFlight is the rows held now (at the end of a run, 0 unless it
	// failed); PeakRowsInFlight the most held at once, never above
	// MaxRowsInFlight. A source counts a whole block's rows from the
	// moment it starts reading the block.
	RowsInFlight, PeakRowsInFlight, MaxRowsInFlight int64
	// The same for estimated bytes, when [MaxBytesInFlight] is set.
	BytesInFlight, PeakBytesInFlight, MaxBytesInFlight int64
	// Elapsed is the operator's running time, from the run's start until
	// it produced its last row.
	Elapsed time.Duration
	// Pool describes the operator's actor pool, if it ran on one.
	Pool *PoolStats
	// Memory describes what an all-to-all operator ([Sort], [GroupBy],
	// [Join], ...) held in memory and spilled; nil for other operators.
	Memory *MemoryStats
}

// MemoryStats describes the rows an all-to-all operator held in memory to
// sort, group, join or shuffle them, and what it spilled beyond its
// [MemoryBudget].
type MemoryStats struct {
	// Budget is the operator's MemoryBudget in bytes.
	Budget int64
	// PeakBytes is the most estimated bytes of rows (and aggregation
	// states) held at once, PeakRows the most rows. PeakBytes stays at or
	// under Budget, except for a single row larger than it, which is held
	// alone.
	PeakBytes, PeakRows int64
	// SpilledRows and SpilledBytes (encoded) were written to SpillFiles
	// files, all of which are removed by the end of the run.
	SpilledRows, SpilledBytes, SpillFiles int64
	// MergePasses counts the merges of spilled files into fewer files
	// before the final merge (0 when the final merge could read them all).
	MergePasses int64
}

// PoolStats describes an actor pool over a run.
type PoolStats struct {
	Min, Max int
	// Peak is the most actors alive at once; Started and Stopped count
	// actors over the run (every started actor is stopped by its end).
	Peak, Started, Stopped int
	// SlicesReserved counts TPU slice reservations (one per actor when the
	// pool holds slices); all are released by the run's end.
	SlicesReserved int
}

func (r *run) snapshot() Stats {
	r.mu.Lock()
	ops := append([]*opState(nil), r.ops...)
	r.mu.Unlock()
	now := time.Now()
	s := Stats{Elapsed: now.Sub(r.start), Rows: r.sunk.Load(), BadRows: r.bad.list()}
	for _, o := range ops {
		end := now
		if e := o.end.Load(); e != 0 {
			end = time.Unix(0, e)
		}
		el := end.Sub(r.start)
		st := OpStats{
			Name: o.name, RowsIn: o.rowsIn.Load(), RowsOut: o.rowsOut.Load(), BadRows: o.bad.Load(),
			RowsInFlight: o.inFlight.Load(), PeakRowsInFlight: o.peakRows.Load(), MaxRowsInFlight: o.maxRows,
			BytesInFlight: o.inBytes.Load(), PeakBytesInFlight: o.peakByte.Load(), MaxBytesInFlight: o.maxBytes,
			Elapsed: el,
		}
		if el > 0 {
			st.RowsPerSecond = float64(st.RowsOut) / el.Seconds()
		}
		if o.pool != nil {
			p := o.pool()
			st.Pool = &p
		}
		if o.mem != nil {
			m := o.mem.snapshot()
			st.Memory = &m
		}
		s.Operators = append(s.Operators, st)
	}
	return s
}

// report stores the run's stats where [CollectStats] asked.
func (r *run) report(err error) {
	if r.cfg.stats == nil {
		return
	}
	*r.cfg.stats = r.snapshot()
	r.cfg.stats.Err = err
}

// String formats the stats as one line per operator.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows in %v", s.Rows, s.Elapsed.Round(time.Millisecond))
	if len(s.BadRows) > 0 {
		fmt.Fprintf(&b, ", %d bad rows skipped", len(s.BadRows))
	}
	width := 0
	for _, o := range s.Operators {
		width = max(width, len(o.Name))
	}
	for _, o := range s.Operators {
		fmt.Fprintf(&b, "\n  %-*s in %d out %d bad %d, %.0f rows/s, peak in flight %d/%d", width, o.Name, o.RowsIn, o.RowsOut, o.BadRows, o.RowsPerSecond, o.PeakRowsInFlight, o.MaxRowsInFlight)
		if p := o.Pool; p != nil {
			fmt.Fprintf(&b, ", pool %d..%d peak %d", p.Min, p.Max, p.Peak)
			if p.SlicesReserved > 0 {
				fmt.Fprintf(&b, ", %d slices reserved", p.SlicesReserved)
			}
		}
		if m := o.Memory; m != nil {
			fmt.Fprintf(&b, ", memory peak %d/%d bytes", m.PeakBytes, m.Budget)
			if m.SpillFiles > 0 {
				fmt.Fprintf(&b, ", spilled %d rows (%d bytes) in %d files", m.SpilledRows, m.SpilledBytes, m.SpillFiles)
			}
		}
	}
	return b.String()
}

// progressLine is the live line: rows/s and rows in flight per operator.
func (s Stats) progressLine() string {
	return strings.Join(lo.Map(s.Operators, func(o OpStats, _ int) string {
		return fmt.Sprintf("%s %.0f/s [%d]", o.Name, o.RowsPerSecond, o.RowsInFlight)
	}), " → ")
}

// startProgress shows a live progress line on stderr while the run goes,
// when asked to or when stderr is a terminal, and returns the function
// that stops it.
func startProgress(r *run) (stop func()) {
	on := r.cfg.progress == progressOn || (r.cfg.progress == progressAuto && term.IsTerminal(int(os.Stderr.Fd())))
	if !on {
		return func() {}
	}
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetItsString("rows"),
		progressbar.OptionShowIts(),
		progressbar.OptionShowCount(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s := r.snapshot()
				bar.Describe(s.progressLine())
				_ = bar.Set64(s.Rows)
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		_ = bar.Finish()
	}
}
