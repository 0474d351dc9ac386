package worker

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultRefusalLogPeriod is how often a worker logs refused handshakes
// unless ServerOptions.RefusalLogPeriod says otherwise.
const DefaultRefusalLogPeriod = time.Minute

// refusalLog logs refused handshakes at a bounded rate: the first refusal
// of a period is logged at once with the count of those it held back since
// the last line; the others of the period are only counted. Anyone can
// knock on a worker's port, so a flood of bad handshakes costs one line per
// period, not one per handshake.
type refusalLog struct {
	log    *slog.Logger
	period time.Duration
	now    func() time.Time

	mu         sync.Mutex
	last       time.Time // when the last line was logged
	suppressed int       // refusals since then, not logged
}

func newRefusalLog(log *slog.Logger, period time.Duration) *refusalLog {
	if period <= 0 {
		period = DefaultRefusalLogPeriod
	}
	return &refusalLog{log: log, period: period, now: time.Now}
}

// note records a refusal and logs it if the period allows.
func (l *refusalLog) note(remote string, status int, reason string) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.period {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	held := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.Warn("goray worker: refused a driver", "remote", remote, "status", status, "reason", reason,
		"refusedSinceLastLog", held, "period", l.period)
}

// flush logs the count of refusals held back, if any.
func (l *refusalLog) flush() {
	l.mu.Lock()
	held := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if held > 0 {
		l.log.Warn("goray worker: refused more drivers", "refusedSinceLastLog", held, "period", l.period)
	}
}
