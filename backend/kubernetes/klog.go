package kubernetes

import (
	"context"
	"log/slog"

	"k8s.io/klog/v2"
)

// RouteKlog sends what client-go logs through klog (such as "Waited
// before sending request ... client-side throttling") to logger instead
// of stderr: klog's info lines at Debug, its errors at Warn, each with the
// attribute source=client-go. klog is process-wide, so the last call
// wins. The backend calls it with Config.Logger unless Config.KeepKlog is
// set; with the default Logger (which discards) client-go is silent.
func RouteKlog(logger *slog.Logger) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	klog.SetSlogLogger(slog.New(klogHandler{logger.Handler()}))
}

// klogHandler lowers klog's levels: client-go's info lines are details of
// the backend's own work, not messages for the program's user.
type klogHandler struct{ h slog.Handler }

func klogLevel(l slog.Level) slog.Level {
	if l >= slog.LevelError {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (k klogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return k.h.Enabled(ctx, klogLevel(l))
}

func (k klogHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, klogLevel(r.Level), r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	out.AddAttrs(slog.String("source", "client-go"))
	return k.h.Handle(ctx, out)
}

func (k klogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return klogHandler{k.h.WithAttrs(as)}
}

func (k klogHandler) WithGroup(name string) slog.Handler {
	return klogHandler{k.h.WithGroup(name)}
}
