package kubernetes

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// klogTarget is where klog's lines go: a handler that writes them to
// stderr, as klog does by default, until RouteKlog names a logger.
var klogTarget atomic.Pointer[slog.Handler]

func init() {
	// klog's logger is process-wide and may only be set while no other
	// goroutine logs through it (klog.SetLogger's contract), so the
	// package sets it once, at init, to a handler that forwards to
	// klogTarget; RouteKlog only swaps the target, which is safe at any
	// time. A program that calls klog.SetLogger itself in main takes
	// klog back, and RouteKlog then has no effect.
	RouteKlog(nil)
	klog.SetSlogLogger(slog.New(klogRoute{}))
}

// RouteKlog sends what client-go logs through klog (such as "Waited
// before sending request ... client-side throttling") to logger instead
// of stderr: klog's info lines at Debug, its errors at Warn, each with the
// attribute source=client-go; nil sends them back to stderr. klog is
// process-wide, so the last call wins; it is safe to call at any time.
// The backend calls it with Config.Logger unless Config.KeepKlog is set;
// with the default Logger (which discards) client-go is silent.
func RouteKlog(logger *slog.Logger) {
	var h slog.Handler
	if logger == nil {
		h = slog.NewTextHandler(os.Stderr, nil)
	} else {
		h = klogHandler{logger.Handler()}
	}
	klogTarget.Store(&h)
}

// klogRoute is klog's handler: it forwards to the current klogTarget,
// with the attributes and groups klog added on the way, in order.
type klogRoute struct {
	with []func(slog.Handler) slog.Handler
}

func (k klogRoute) target() slog.Handler {
	h := *klogTarget.Load()
	for _, w := range k.with {
		h = w(h)
	}
	return h
}

func (k klogRoute) Enabled(ctx context.Context, l slog.Level) bool {
	return k.target().Enabled(ctx, l)
}

func (k klogRoute) Handle(ctx context.Context, r slog.Record) error {
	return k.target().Handle(ctx, r)
}

func (k klogRoute) WithAttrs(as []slog.Attr) slog.Handler {
	return klogRoute{append(slices.Clip(k.with), func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })}
}

func (k klogRoute) WithGroup(name string) slog.Handler {
	return klogRoute{append(slices.Clip(k.with), func(h slog.Handler) slog.Handler { return h.WithGroup(name) })}
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
