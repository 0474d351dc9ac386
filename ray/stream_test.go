package ray_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

var (
	produced atomic.Int64 // values countTo yielded, in this process
	// countTo yields 0..N-1; it fails after FailAt values when FailAt > 0.
	countTo = ray.NewStreamTask("ray_test.count_to", func(ctx context.Context, in countArgs, yield func(int) error) error {
		for i := range in.N {
			if in.FailAt > 0 && i == in.FailAt {
				return fmt.Errorf("no number %d", i)
			}
			if err := yield(i); err != nil {
				return err
			}
			produced.Add(1)
		}
		return nil
	})
	closedSeen = make(chan error, 1)
	// forever yields until its caller goes, then reports yield's error.
	forever = ray.NewStreamTask("ray_test.forever", func(ctx context.Context, _ struct{}, yield func(string) error) error {
		for i := 0; ; i++ {
			if err := yield(fmt.Sprint(i)); err != nil {
				closedSeen <- err
				return err
			}
		}
	})
	panicky = ray.NewStreamTask("ray_test.panicky", func(ctx context.Context, n int, yield func(int) error) error {
		yield(1) //nolint:errcheck
		var m map[int]int
		m[n] = n // panics
		return nil
	})
)

type countArgs struct{ N, FailAt int }

func TestStreamTask(t *testing.T) {
	for _, codec := range []bool{true, false} {
		t.Run(fmt.Sprintf("codec=%v", codec), func(t *testing.T) {
			ctx := context.Background()
			c := localCluster(t, nil, &ray.Options{DisableCodec: !codec})
			t.Run("values in order", func(t *testing.T) {
				is := is.New(t)
				var got []int
				for v, err := range countTo.Remote(ctx, c, countArgs{N: 100}, ray.StreamBuffer(3)).All(ctx) {
					is.NoErr(err)
					got = append(got, v)
				}
				is.Equal(len(got), 100)
				for i, v := range got {
					is.Equal(v, i)
				}
			})
			t.Run("error after k values", func(t *testing.T) {
				is := is.New(t)
				s := countTo.Remote(ctx, c, countArgs{N: 100, FailAt: 7})
				for i := range 7 {
					v, err := s.Next(ctx)
					is.NoErr(err)
					is.Equal(v, i)
				}
				_, err := s.Next(ctx)
				is.Equal(ray.CodeOf(err), ray.TaskFailed)
				var te *ray.TaskError
				is.True(errors.As(err, &te))
				is.Equal(te.Task, "ray_test.count_to")
				is.True(strings.Contains(err.Error(), "no number 7"))
				_, again := s.Next(ctx)
				is.Equal(again, err) // the error stays
			})
			t.Run("end", func(t *testing.T) {
				is := is.New(t)
				s := countTo.Remote(ctx, c, countArgs{N: 2})
				for range 2 {
					_, err := s.Next(ctx)
					is.NoErr(err)
				}
				_, err := s.Next(ctx)
				is.Equal(err, io.EOF)
				_, err = s.Next(ctx)
				is.Equal(err, io.EOF)
			})
			t.Run("panic", func(t *testing.T) {
				is := is.New(t)
				var got []int
				var last error
				for v, err := range panicky.Remote(ctx, c, 3).All(ctx) {
					if err != nil {
						last = err
						break
					}
					got = append(got, v)
				}
				is.Equal(got, []int{1})
				var te *ray.TaskError
				is.True(errors.As(last, &te))
				is.True(te.Panicked)
				is.True(strings.Contains(te.Stack, "stream_test.go"))
			})
			t.Run("close stops the task", func(t *testing.T) {
				is := is.New(t)
				for v, err := range forever.Remote(ctx, c, struct{}{}).All(ctx) {
					is.NoErr(err)
					if v == "10" {
						break // closes the stream
					}
				}
				select {
				case err := <-closedSeen:
					is.Equal(ray.CodeOf(err), ray.Canceled) // yield failed: the caller has gone
				case <-time.After(10 * time.Second):
					t.Fatal("the task did not see its stream closed")
				}
				// Its CPU is free again.
				v, err := countTo.Remote(ctx, c, countArgs{N: 1}, ray.Resources{ray.CPU: 4}).Next(ctx)
				is.NoErr(err)
				is.Equal(v, 0)
			})
		})
	}
}

// A slow consumer pauses the task: it runs at most StreamBuffer values
// ahead in its worker, and the caller holds at most as many more.
func TestStreamBackpressure(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c := localCluster(t, nil)
	produced.Store(0)
	s := countTo.Remote(ctx, c, countArgs{N: 1000}, ray.StreamBuffer(4))
	defer s.Close()
	v, err := s.Next(ctx)
	is.NoErr(err)
	is.Equal(v, 0)
	time.Sleep(200 * time.Millisecond) // the task runs ahead as far as it may
	n := produced.Load()
	t.Logf("produced %d values while the caller consumed 1", n)
	is.True(n <= 1+4+4+1) // consumed + held by the caller + buffered in the worker + one in yield
	for i := 1; i < 1000; i++ {
		v, err := s.Next(ctx)
		is.NoErr(err)
		is.Equal(v, i)
	}
}

func TestStreamBadInput(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c := localCluster(t, nil)
	_, err := countTo.Remote(ctx, c, countArgs{N: 1}, ray.StreamBuffer(0)).Next(ctx)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	is.True(strings.Contains(err.Error(), "StreamBuffer(0): must be at least 1"))
	_, err = countTo.Remote(ctx, c, countArgs{N: 1}, ray.Resources{ray.CPU: 64}).Next(ctx)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	s := countTo.Remote(ctx, c, countArgs{N: 5})
	s.Close()
	_, err = s.Next(ctx)
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	plain, err := ray.LookupTask[countArgs, int]("ray_test.count_to")
	is.NoErr(err) // a streaming task's name is a task name
	_, err = plain.Remote(ctx, c, countArgs{N: 1}).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	is.True(strings.Contains(err.Error(), `"ray_test.count_to" is a streaming task; call it with its StreamTask's Remote`))
	_, err = plain.Remote(ctx, c, countArgs{N: 1}, ray.StreamBuffer(4)).Get(ctx)
	is.Equal(ray.CodeOf(err), ray.InvalidArgument) // not silently ignored
	is.True(strings.Contains(err.Error(), "StreamBuffer applies to streaming tasks and methods"))
}

type ticker struct{ ticks int }

var (
	tickerClass = ray.NewActorClass("ray_test.ticker", func(ctx context.Context, start int) (*ticker, error) {
		return &ticker{ticks: start}, nil
	})
	// tick yields the actor's next n ticks; it fails at tick FailAt.
	tick = ray.NewStreamMethod(tickerClass, "tick", func(ctx context.Context, t *ticker, in countArgs, yield func(int) error) error {
		for range in.N {
			t.ticks++
			if in.FailAt > 0 && t.ticks == in.FailAt {
				return fmt.Errorf("tick %d failed", t.ticks)
			}
			if err := yield(t.ticks); err != nil {
				return err
			}
		}
		return nil
	})
	ticks = ray.NewMethod(tickerClass, "ticks", func(ctx context.Context, t *ticker, _ struct{}) (int, error) {
		return t.ticks, nil
	})
)

func TestStreamMethod(t *testing.T) {
	for _, codec := range []bool{true, false} {
		t.Run(fmt.Sprintf("codec=%v", codec), func(t *testing.T) {
			is := is.New(t)
			ctx := context.Background()
			c := localCluster(t, nil, &ray.Options{DisableCodec: !codec})
			h := tickerClass.Remote(ctx, c, 100)

			// The stream holds the actor's only slot: a call waits for it.
			s := tick.Remote(ctx, h, countArgs{N: 20}, ray.StreamBuffer(2))
			for i := range 3 {
				v, err := s.Next(ctx)
				is.NoErr(err)
				is.Equal(v, 101+i)
			}
			after := ticks.Remote(ctx, h, struct{}{})
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			ready, _, _ := ray.Wait(wctx, []ray.ObjectRef[int]{after}, 1)
			cancel()
			is.Equal(len(ready), 0) // no call runs while the streaming method holds the actor
			for i := 3; i < 20; i++ {
				v, err := s.Next(ctx)
				is.NoErr(err)
				is.Equal(v, 101+i)
			}
			_, err := s.Next(ctx)
			is.Equal(err, io.EOF)
			n, err := after.Get(ctx)
			is.NoErr(err)
			is.Equal(n, 120) // after the stream, with its state

			// An error after values.
			var got []int
			var last error
			for v, err := range tick.Remote(ctx, h, countArgs{N: 10, FailAt: 123}).All(ctx) {
				if err != nil {
					last = err
					break
				}
				got = append(got, v)
			}
			is.Equal(got, []int{121, 122})
			is.Equal(ray.CodeOf(last), ray.TaskFailed)
			is.True(strings.Contains(last.Error(), "tick 123 failed"))
			is.True(strings.Contains(last.Error(), "ray_test.ticker.tick"))

			// Closing cancels the method: the actor is free again at once.
			s = tick.Remote(ctx, h, countArgs{N: 1 << 30})
			v, err := s.Next(ctx)
			is.NoErr(err)
			is.Equal(v, 124)
			s.Close()
			n, err = ticks.Remote(ctx, h, struct{}{}).Get(ctx)
			is.NoErr(err)
			is.True(n >= 124 && n < 124+40) // it stopped soon after
		})
	}
}
