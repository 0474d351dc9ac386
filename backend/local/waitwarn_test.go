package local_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// recordsTo is a slog handler sending each record's message and
// attributes, as text, to a channel.
type recordsTo chan string

func (recordsTo) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsTo) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	select {
	case h <- b.String():
	default:
	}
	return nil
}
func (h recordsTo) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordsTo) WithGroup(string) slog.Handler      { return h }

// Options.WaitWarning reaches the runtime: a slice reservation that waits
// for a reserved slice is logged through Options.Logger.
func TestWaitWarningOption(t *testing.T) {
	is := is.New(t)
	logs := make(recordsTo, 256)
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2"}}},
		&local.Options{Logger: slog.New(logs), WaitWarning: 20 * time.Millisecond})
	is.NoErr(err)
	ctx := context.Background()
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	shape, err := tpu.NewSliceShape(tpu.V6e, "2x2", 0)
	is.NoErr(err)
	first, err := b.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "first"})
	is.NoErr(err)
	defer b.RemovePlacementGroup(ctx, first.Group)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.ReserveSlices(wctx, &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: "second"})
	}()
	defer func() { cancel(); <-done }()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-logs:
			if strings.HasPrefix(line, "cluster: work waits to start") && strings.Contains(line, `slice reservation "second"`) {
				is.True(strings.Contains(line, `reserved by "first"`)) // names who holds the slice
				return
			}
		case <-timeout:
			t.Fatal("no warning in 30s about the reservation that waits")
		}
	}
}
