package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// recordLog is a slog handler that keeps the records' messages and
// attributes.
type recordLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordLog) WithGroup(string) slog.Handler            { return h }
func (h *recordLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, b.String())
	return nil
}

func (h *recordLog) matching(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestRefusalsLoggedAtBoundedRate: a flood of refused handshakes costs one
// log line per period, carrying the count of those held back.
func TestRefusalsLoggedAtBoundedRate(t *testing.T) {
	is := is.New(t)
	rec := &recordLog{}
	addr, _ := startServer(t, &ServerOptions{Logger: slog.New(rec), RefusalLogPeriod: time.Hour})
	ctx := context.Background()
	for range 50 {
		_, err := Dial(ctx, addr, &ClientOptions{Token: "wrong", Manifest: fakeManifest})
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	}
	lines := rec.matching("refused")
	is.Equal(len(lines), 1) // one line for the period, not one per refusal
	is.True(strings.Contains(lines[0], "token is missing or wrong"))
}

func TestRefusalLogPeriods(t *testing.T) {
	is := is.New(t)
	rec := &recordLog{}
	l := newRefusalLog(slog.New(rec), time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.note("a", 401, "bad token") // logged
	for range 9 {
		now = now.Add(time.Second)
		l.note("b", 401, "bad token") // held back
	}
	now = now.Add(time.Minute)
	l.note("c", 412, "skew") // logged, with the 9 held back
	l.note("d", 412, "skew") // held back
	l.flush()
	lines := rec.matching("refused")
	is.Equal(len(lines), 3)
	is.True(strings.Contains(lines[0], "remote=a") && strings.Contains(lines[0], "refusedSinceLastLog=0"))
	is.True(strings.Contains(lines[1], "remote=c") && strings.Contains(lines[1], "refusedSinceLastLog=9"))
	is.True(strings.Contains(lines[2], "refusedSinceLastLog=1"))
}
