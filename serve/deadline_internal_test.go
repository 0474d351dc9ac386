package serve

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/matryer/is"
)

// withDeadline's context behaves as context.WithTimeout's: it ends at its
// deadline (Err asks the clock when nothing watches), with its parent, or
// when cancelled; its Done channel and AfterFunc functions follow, and
// contexts derived from it too.
func TestDeadlineCtx(t *testing.T) {
	t.Run("deadline, unwatched", func(t *testing.T) {
		is := is.New(t)
		ctx, cancel := withDeadline(context.Background(), 20*time.Millisecond)
		defer cancel()
		is.NoErr(ctx.Err())
		dl, ok := ctx.Deadline()
		is.True(ok && time.Until(dl) <= 20*time.Millisecond)
		for ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		is.Equal(ctx.Err(), context.DeadlineExceeded)
		is.True(errors.Is(context.Cause(ctx), context.DeadlineExceeded))
		<-ctx.Done() // closed already
	})
	t.Run("deadline, watched", func(t *testing.T) {
		is := is.New(t)
		ctx, cancel := withDeadline(context.Background(), 20*time.Millisecond)
		defer cancel()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		derived, dcancel := context.WithCancel(ctx)
		defer dcancel()
		<-ctx.Done()
		<-ran
		<-derived.Done()
		is.Equal(ctx.Err(), context.DeadlineExceeded)
		is.Equal(derived.Err(), context.DeadlineExceeded)
	})
	t.Run("parent ends", func(t *testing.T) {
		is := is.New(t)
		parent, pcancel := context.WithCancel(context.WithValue(context.Background(), lenientKey{}, 7))
		ctx, cancel := withDeadline(parent, time.Hour)
		defer cancel()
		is.Equal(ctx.Value(lenientKey{}), 7)
		done := ctx.Done()
		pcancel()
		<-done
		is.Equal(ctx.Err(), context.Canceled)
		// unwatched: Err asks the parent
		ctx2, cancel2 := withDeadline(parent, time.Hour)
		defer cancel2()
		is.Equal(ctx2.Err(), context.Canceled)
	})
	t.Run("cancelled; AfterFunc stopped", func(t *testing.T) {
		is := is.New(t)
		ctx, cancel := withDeadline(context.Background(), time.Hour)
		stop := context.AfterFunc(ctx, func() { t.Error("stopped AfterFunc ran") })
		is.True(stop())
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		cancel()
		<-ran
		is.Equal(ctx.Err(), context.Canceled)
		<-ctx.Done()
		cancel() // twice is fine
		is.True(!stop())
	})
}
