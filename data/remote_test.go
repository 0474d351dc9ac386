package data_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
)

var (
	squareFunc = data.NewMapFunc("data_test.square", square)
	evenFunc   = data.NewFilterFunc("data_test.even", even)
	twiceFunc  = data.NewFlatMapFunc("data_test.twice", twice)
	sumFunc    = data.NewBatchFunc("data_test.sum", sum)
	unlucky    = data.NewMapFunc("data_test.unlucky", func(_ context.Context, x int) (int, error) {
		if x == 13 {
			return 0, errors.New("13 is unlucky")
		}
		return x, nil
	})
)

// scaler is an actor that multiplies by its factor and remembers the TPU
// slice it runs on.
type scaler struct {
	factor int
	slice  string
}

var (
	scalerClass = ray.NewActorClass("data_test.scaler", func(ctx context.Context, factor int) (*scaler, error) {
		rc, _ := ray.Runtime(ctx)
		return &scaler{factor: factor, slice: rc.Env("TPU_NAME")}, nil
	})
	scaleMethod = data.NewMapMethod(scalerClass, "scale", func(_ context.Context, s *scaler, x int) (int, error) { return x * s.factor, nil })
	sliceMethod = data.NewBatchMethod(scalerClass, "slice", func(ctx context.Context, s *scaler, xs []int) ([]string, error) {
		out := make([]string, len(xs))
		for i := range xs {
			out[i] = s.slice
		}
		return out, nil
	})
	// blockMethod blocks until its call is cancelled (by killing the actor).
	blockMethod = data.NewMapMethod(scalerClass, "block", func(ctx context.Context, s *scaler, x int) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
)

// meeting makes the first two calls of meetMethod wait for each other, so
// a pool must grow to two actors to get past them.
var meeting = struct {
	sync.Mutex
	n    int
	both chan struct{}
}{both: make(chan struct{})}

var meetMethod = data.NewMapMethod(scalerClass, "meet", func(ctx context.Context, s *scaler, x int) (int, error) {
	if x < 2 {
		meeting.Lock()
		if meeting.n++; meeting.n == 2 {
			close(meeting.both)
		}
		both := meeting.both
		meeting.Unlock()
		select {
		case <-both:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return x * s.factor, nil
})

// newCluster is a simulated cluster of CPU nodes and two v6e 2x2 slices
// (one host of 4 chips each).
func newCluster(t *testing.T) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 2, Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 2}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// free counts the free slices.
func free(t *testing.T, c *ray.Cluster) int {
	t.Helper()
	states, err := ray.TPUSlices(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range states {
		if st.ReservedBy == 0 {
			n++
		}
	}
	return n
}

// checkReleased fails unless every slice is free and no actor is alive.
func checkReleased(t *testing.T, c *ray.Cluster) {
	t.Helper()
	ctx := context.Background()
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.ReservedBy != 0 {
			t.Errorf("slice %s still reserved by %s", st.Name, st.ReservedName)
		}
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range snap.Actors {
		if a.State != "DEAD" {
			t.Errorf("actor %d (%s) is %s", a.ID, a.Class, a.State)
		}
	}
}

func TestOnTasks(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	tests := []struct {
		name string
		ds   *data.Dataset[int]
		want []int
	}{
		{"map", data.Apply(data.Range(500), squareFunc, data.OnTasks(c)), want(500, func(i int) []int { return []int{i * i} })},
		{"filter", data.Apply(data.Range(500), evenFunc, data.OnTasks(c)), want(500, func(i int) []int {
			if i%2 == 0 {
				return []int{i}
			}
			return nil
		})},
		{"flat_map", data.Apply(data.Range(500), twiceFunc, data.OnTasks(c)), want(500, func(i int) []int { return []int{i, i} })},
		{"batches", data.Apply(data.Range(10), sumFunc, data.OnTasks(c), data.BatchSize(5)), []int{10, 35}},
		{"in driver", data.Apply(data.Range(500), squareFunc), want(500, func(i int) []int { return []int{i * i} })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got, err := data.Take(ctx, tt.ds, 10_000, data.BlockRows(50))
			is.NoErr(err)
			is.Equal(got, tt.want)
		})
	}
	t.Run("bad row", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Count(ctx, data.Apply(data.Range(100), unlucky, data.OnTasks(c)))
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos, data.Pos{Source: "range", Row: 13})
		is.Equal(re.Op, "data_test.unlucky")
		is.Equal(re.Err.Error(), "13 is unlucky") // the message crossed the cluster
		var st data.Stats
		n, err := data.Count(ctx, data.Apply(data.Range(100), unlucky, data.OnTasks(c)), data.SkipBadRows(1), data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(n, int64(99))
		is.Equal(len(st.BadRows), 1)
	})
	t.Run("plain func", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Count(ctx, data.Map(data.Range(10), square, data.OnTasks(c)))
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), "OnTasks needs a registered function"))
	})
}

func TestPool(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	v6e := &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"}
	t.Run("cpu", func(t *testing.T) {
		is := is.New(t)
		var st data.Stats
		ds := data.ApplyPool(data.Range(1000), data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Arg: 3, Min: 1, Max: 3}, scaleMethod, data.BatchSize(25))
		got, err := data.Take(ctx, ds, 2000, data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(got, want(1000, func(i int) []int { return []int{3 * i} }))
		p := st.Operators[1].Pool
		is.True(p != nil)
		is.True(p.Peak >= 1 && p.Peak <= 3)
		is.Equal(p.Started, p.Stopped) // every actor stopped by the end
		checkReleased(t, c)
	})
	t.Run("slices", func(t *testing.T) {
		is := is.New(t)
		var st data.Stats
		ds := data.ApplyPool(data.Range(400), data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Arg: 1, Min: 1, Max: 3, Slice: v6e}, sliceMethod, data.BatchSize(10))
		got, err := data.Take(ctx, ds, 1000, data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(len(got), 400)
		used := slices.Compact(slices.Sorted(slices.Values(got)))
		for _, s := range used {
			is.True(strings.HasPrefix(s, "v6e-4-")) // each actor saw its slice's TPU_NAME
		}
		p := st.Operators[1].Pool
		is.True(p.Peak <= 2) // only two v6e 2x2 slices exist; the third actor was never started
		is.Equal(p.SlicesReserved, p.Started)
		checkReleased(t, c)
	})
	t.Run("shrink releases the slice", func(t *testing.T) {
		is := is.New(t)
		meeting.Lock()
		meeting.n, meeting.both = 0, make(chan struct{})
		meeting.Unlock()
		// The first call waits for the second, which waits for an actor:
		// the pool grows after GrowAfter, and shrinks after IdleTimeout.
		pool := data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Arg: 1, Min: 1, Max: 2, Slice: v6e,
			GrowAfter: 5 * time.Millisecond, IdleTimeout: 5 * time.Millisecond}
		ds := data.ApplyPool(data.Range(200, data.BlockRows(1)), pool, meetMethod, data.Concurrency(2))
		deadline := time.Now().Add(30 * time.Second) // a guard against hanging, not a wait
		var got []int
		for v, err := range data.Rows(ctx, ds, data.MaxRowsInFlight(8)) {
			is.NoErr(err)
			if len(got) == 2 {
				// The first two rows needed both slices. With the sink
				// stalled here, the pool idles and shrinks back to one
				// actor, releasing the other's slice while the run goes on.
				for free(t, c) == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the pool never shrank")
					}
					runtime.Gosched()
				}
			}
			got = append(got, v)
		}
		is.Equal(got, want(200, func(i int) []int { return []int{i} }))
		checkReleased(t, c)
	})
	t.Run("no slice of the shape", func(t *testing.T) {
		is := is.New(t)
		ds := data.ApplyPool(data.Range(10), data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Min: 1, Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4"}}, scaleMethod)
		_, err := data.Count(ctx, ds)
		is.True(errors.Is(err, ray.ErrInfeasible))
		checkReleased(t, c)
	})
	t.Run("bad size", func(t *testing.T) {
		is := is.New(t)
		ds := data.ApplyPool(data.Range(10), data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Min: 2, Max: 1}, scaleMethod)
		_, err := data.Count(ctx, ds)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), "need 1 <= Min <= Max"))
	})
}

// TestCancel cancels runs in the middle: the sink's error is the context's,
// every operator stops (goleak in TestMain checks goroutines), and every
// actor and slice of the pools is released.
func TestCancel(t *testing.T) {
	c := newCluster(t)
	v6e := &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"}
	tests := []struct {
		name string
		ds   func(started chan<- struct{}) *data.Dataset[int]
	}{
		{"driver", func(started chan<- struct{}) *data.Dataset[int] {
			var once atomic.Bool
			return data.Map(data.Map(data.Range(1_000_000), square), func(ctx context.Context, x int) (int, error) {
				if once.CompareAndSwap(false, true) {
					close(started)
				}
				<-ctx.Done()
				return 0, ctx.Err()
			})
		}},
		{"tasks and pool", func(started chan<- struct{}) *data.Dataset[int] {
			var once atomic.Bool
			ds := data.Apply(data.Range(1_000_000), squareFunc, data.OnTasks(c))
			ds = data.Map(ds, func(_ context.Context, x int) (int, error) {
				if once.CompareAndSwap(false, true) {
					close(started)
				}
				return x, nil
			})
			return data.ApplyPool(ds, data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Arg: 1, Min: 2, Slice: v6e}, blockMethod, data.BatchSize(10))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			ds := tt.ds(started)
			go func() {
				<-started
				cancel()
			}()
			_, err := data.Count(ctx, ds)
			is.Equal(err, context.Canceled)
			checkReleased(t, c)
		})
	}
	t.Run("break out of the loop", func(t *testing.T) {
		is := is.New(t)
		ds := data.ApplyPool(data.Range(1_000_000), data.Pool[*scaler, int]{Cluster: c, Class: scalerClass, Arg: 2, Min: 2, Slice: v6e}, scaleMethod)
		n := 0
		for v, err := range data.Rows(context.Background(), ds) {
			is.NoErr(err)
			is.Equal(v, 2*n)
			if n++; n == 100 {
				break
			}
		}
		checkReleased(t, c)
	})
}

var _ = fmt.Sprint
