package data_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
)

// A panic in an operator's function or in a source fails the run with a
// *data.PanicError naming the operator and the value (the stack is in
// it); the program goes on, and no count or rows come back as complete.
func TestPanicFailsTheRun(t *testing.T) {
	ctx := context.Background()
	t.Run("operator", func(t *testing.T) {
		is := is.New(t)
		ds := data.Map(data.Range(1000), func(_ context.Context, x int) (int, error) {
			if x == 500 {
				var m map[int]int
				m[x] = x // panics
			}
			return x, nil
		}, data.Concurrency(2))
		n, err := data.Count(ctx, ds)
		var pe *data.PanicError
		is.True(errors.As(err, &pe))
		is.Equal(n, int64(0))
		is.True(strings.Contains(err.Error(), "panicked: assignment to entry in nil map"))
		is.True(strings.Contains(string(pe.Stack), "panic_test.go"))
	})
	t.Run("source", func(t *testing.T) {
		is := is.New(t)
		b := storage.NewMem()
		defer b.Close()
		is.NoErr(storage.WriteAll(ctx, b, "f", []byte("x")))
		ds := data.ReadFiles("read_boom", data.InBucket(b, "f"), func(ctx context.Context, f data.File, rows data.RowWriter[int]) error {
			panic("bad tag")
		})
		n, err := data.Count(ctx, ds)
		var pe *data.PanicError
		is.True(errors.As(err, &pe))
		is.Equal(n, int64(0))
		is.Equal(pe.Value, "bad tag")
		is.True(strings.Contains(err.Error(), "source read_boom panicked: bad tag"))
	})
}

var panicsAt57 = data.NewMapFunc("data_test.panics_at_57", func(_ context.Context, x int) (int, error) {
	if x == 57 {
		var m map[int]int
		m[x] = x // panics, in the task
	}
	return x, nil
})

// A registered function that panics in a ray task fails the run with a
// *data.PanicError as a panic in the driver does (the task's stack in it,
// the *ray.TaskError its cause), also with SkipBadRows: a panic is a bug,
// not a bad row.
func TestPanicInTaskFailsTheRun(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	for _, skip := range []int{0, 1000} {
		is := is.New(t)
		opts := []data.Option{data.BlockRows(10)}
		if skip > 0 {
			opts = append(opts, data.SkipBadRows(skip))
		}
		n, err := data.Count(ctx, data.Apply(data.Range(200), panicsAt57, data.OnTasks(c)), opts...)
		is.Equal(n, int64(0))
		var pe *data.PanicError
		is.True(errors.As(err, &pe))
		is.Equal(pe.Op, "data_test.panics_at_57")
		var te *ray.TaskError
		is.True(errors.As(err, &te))
		is.True(te.Panicked)
		is.True(strings.Contains(string(pe.Stack), "panic_test.go"))
		is.True(strings.Contains(err.Error(), "assignment to entry in nil map"))
	}
}
