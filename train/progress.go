package train

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressSink shows a run's progress.
type progressSink interface {
	report(Report)
	failure(Failure)
	finish()
	// alreadyFinished says that the run had finished before, at
	// iteration it with metrics m.
	alreadyFinished(it int, m Metrics, at time.Time)
}

func newProgress(cfg RunConfig) progressSink {
	w := cfg.ProgressOutput
	if w == nil {
		w = os.Stderr
	}
	mode := cfg.Progress
	if mode == ProgressAuto {
		mode = ProgressLog
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			mode = ProgressBar
		}
	}
	switch mode {
	case ProgressBar:
		total := int64(cfg.TotalIterations)
		if total <= 0 {
			total = -1
		}
		return &barProgress{w: w, name: cfg.Name, bar: progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(cfg.Name),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("it"),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(50*time.Millisecond),
			progressbar.OptionSetWidth(20),
		)}
	case ProgressLog:
		log := cfg.ProgressLogger
		if log == nil {
			log = slog.New(slog.NewTextHandler(w, nil))
		}
		every := cfg.ProgressInterval
		if every == 0 {
			every = time.Second
		}
		return &logProgress{log: log, name: cfg.Name, every: every}
	}
	return noProgress{}
}

// formatMetrics renders metrics sorted by name: "loss=0.0123 mse=2".
func formatMetrics(m Metrics) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.4g", k, m[k])
	}
	return strings.Join(parts, " ")
}

type noProgress struct{}

func (noProgress) report(Report)   {}
func (noProgress) failure(Failure) {}
func (noProgress) finish()         {}

func (noProgress) alreadyFinished(int, Metrics, time.Time) {}

type barProgress struct {
	mu   sync.Mutex
	w    io.Writer
	name string
	bar  *progressbar.ProgressBar
}

func (p *barProgress) report(r Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Describe(fmt.Sprintf("%s attempt %d: %s", p.name, r.Attempt, formatMetrics(r.Metrics)))
	p.bar.Set(r.Iteration) //nolint:errcheck // drawing errors are not the run's
}

func (p *barProgress) failure(f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Clear() //nolint:errcheck // drawing errors are not the run's
	fmt.Fprintf(p.w, "%s: attempt %d failed: rank %d on %s: %s; restarting from checkpoint %d\n", p.name, f.Attempt, f.Rank, f.Host, f.Cause, f.ResumeFrom)
}

func (p *barProgress) alreadyFinished(it int, m Metrics, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Clear() //nolint:errcheck // drawing errors are not the run's
	fmt.Fprintf(p.w, "%s: the run had finished at iteration %d (%s) on %s; nothing to train\n", p.name, it, formatMetrics(m), at.Format(time.RFC3339))
}

func (p *barProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Finish() //nolint:errcheck // drawing errors are not the run's
	fmt.Fprintln(p.w)
}

// logProgress logs the first report of each attempt, then at most one
// report per interval, the last report, and every failure.
type logProgress struct {
	log   *slog.Logger
	name  string
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	attempt int
	pending *Report // the latest report not logged yet
}

func (p *logProgress) report(r Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if r.Attempt == p.attempt && !p.last.IsZero() && now.Sub(p.last) < p.every {
		p.pending = &r
		return
	}
	p.attempt, p.last, p.pending = r.Attempt, now, nil
	p.emit(r)
}

func (p *logProgress) emit(r Report) {
	attrs := []any{"run", p.name, "attempt", r.Attempt, "iteration", r.Iteration}
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		attrs = append(attrs, k, r.Metrics[k])
	}
	p.log.Info("train: report", attrs...)
}

func (p *logProgress) failure(f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != nil {
		p.emit(*p.pending)
		p.pending = nil
	}
	p.last = time.Time{}
	p.log.Warn("train: attempt failed", "run", p.name, "attempt", f.Attempt, "rank", f.Rank, "host", f.Host, "cause", f.Cause, "resume_from", f.ResumeFrom)
}

func (p *logProgress) alreadyFinished(it int, m Metrics, at time.Time) {
	attrs := []any{"run", p.name, "iteration", it, "finished_at", at}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		attrs = append(attrs, k, m[k])
	}
	p.log.Info("train: the run had finished; nothing to train", attrs...)
}

func (p *logProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != nil {
		p.emit(*p.pending)
		p.pending = nil
	}
}

// reportSink passes rank 0's reports to the progress display and the
// user's callback, one at a time, and remembers the last one.
type reportSink struct {
	mu       sync.Mutex
	progress progressSink
	onReport func(Report)
	last     *Report
}

func (s *reportSink) report(r Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &r
	s.progress.report(r)
	if s.onReport != nil {
		s.onReport(r)
	}
}

func (s *reportSink) lastReport() *Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
