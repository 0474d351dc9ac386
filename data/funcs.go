package data

import (
	"context"
	"errors"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// Func is a row or batch function that [Apply] runs: in the driver's
// goroutines by default, or as ray tasks with [OnTasks] when it was
// registered by name ([NewMapFunc], [NewFilterFunc], [NewFlatMapFunc],
// [NewBatchFunc]). A *Func is immutable and safe for concurrent use.
//
// Worker processes cannot receive Go closures, so a function that is to run
// as a task must be registered at package initialization, under a name
// that every process of the program shares, like any ray.Task. Plain
// functions passed to [Map], [Filter], [FlatMap] and [MapBatches] are
// never registered and always run in the driver.
type Func[I, O any] struct {
	name  string
	local kernel[I, O]
	task  *ray.Task[[]I, wireBatch[O]]
	fuse  fuseKind
	// owned, when set, is local for rows that the operator owns (the
	// output of the operator before it in a stage): it may write its
	// output over them.
	owned kernel[I, O]
}

// Name returns the function's name (its task name when registered).
func (f *Func[I, O]) Name() string { return f.name }

// wireBatch is a kernel's result as it crosses the cluster from a task or
// actor: each failed row's error travels as its message.
type wireBatch[O any] struct {
	Rows   []O           `json:"rows"`
	PerRow []int32       `json:"per_row,omitempty"`
	Failed []wireFailure `json:"failed,omitempty"`
}

type wireFailure struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// toWire is r, the result for n rows, as it crosses the cluster.
func toWire[O any](r result[O], n int) wireBatch[O] {
	w := wireBatch[O]{Rows: r.out, PerRow: r.perRow}
	if r.sel != nil {
		w.PerRow = make([]int32, n)
		for _, i := range r.sel {
			w.PerRow[i]++
		}
	}
	for _, f := range r.failed {
		w.Failed = append(w.Failed, wireFailure{Index: f.index, Error: f.err.Error()})
	}
	return w
}

func fromWire[O any](w wireBatch[O]) result[O] {
	r := result[O]{out: w.Rows, perRow: w.PerRow}
	for _, f := range w.Failed {
		r.failed = append(r.failed, failure{index: f.Index, err: errors.New(f.Error)})
	}
	return r
}

// remoteKernel runs a registered kernel in a task or actor: a failing
// batch fails the call, bad rows travel in the result.
func remoteKernel[I, O any](k kernel[I, O]) func(context.Context, []I) (wireBatch[O], error) {
	return func(ctx context.Context, rows []I) (wireBatch[O], error) {
		r, err := k(ctx, rows)
		if err != nil {
			return wireBatch[O]{}, err
		}
		return toWire(r, len(rows)), nil
	}
}

func register[I, O any](name string, k, owned kernel[I, O], fuse fuseKind) *Func[I, O] {
	return &Func[I, O]{name: name, local: k, owned: owned, task: ray.NewTask(name, remoteKernel(k)), fuse: fuse}
}

// NewMapFunc registers fn, applied to each row, as a task named name (see
// [ray.NewTask] for naming rules; it panics on a duplicate). Call it at
// package initialization.
func NewMapFunc[I, O any](name string, fn func(context.Context, I) (O, error)) *Func[I, O] {
	return register(name, mapKernel(fn, false), mapKernel(fn, true), fuseKeeps)
}

// NewFilterFunc registers fn, which keeps the rows it returns true for, as
// a task named name.
func NewFilterFunc[T any](name string, fn func(context.Context, T) (bool, error)) *Func[T, T] {
	return register(name, filterKernel(fn, false), filterKernel(fn, true), fuseKeeps)
}

// NewFlatMapFunc registers fn, which turns each row into zero or more, as a
// task named name.
func NewFlatMapFunc[I, O any](name string, fn func(context.Context, I) ([]O, error)) *Func[I, O] {
	return register(name, flatMapKernel(fn), nil, fuseGrows)
}

// NewBatchFunc registers fn, applied to batches of rows, as a task named
// name. An error fails the whole batch: each of its rows is a bad row.
func NewBatchFunc[I, O any](name string, fn func(context.Context, []I) ([]O, error)) *Func[I, O] {
	return register(name, batchKernel(fn), nil, fuseGrows)
}

// compute says where an operator runs; nil is in the driver.
type compute interface{ isCompute() }

type tasksCompute struct {
	c    *ray.Cluster
	opts []ray.TaskOption
}

func (tasksCompute) isCompute() {}

// OnTasks runs an operator of [Apply] as ray tasks on cluster c, one task
// per block (or batch), with [Concurrency] tasks in flight and opts on
// each. The function must be registered ([NewMapFunc] and friends).
func OnTasks(c *ray.Cluster, opts ...ray.TaskOption) Option {
	return optionFunc(func(cfg *config) {
		if c == nil {
			invalid(cfg, "OnTasks: nil cluster")
			return
		}
		cfg.compute = tasksCompute{c: c, opts: opts}
	})
}

// Apply adds an operator that applies f to d's rows, in the driver or, with
// [OnTasks], as ray tasks. Options: [OnTasks], [Concurrency], [BatchSize],
// [MaxRowsInFlight], [MaxBytesInFlight], [Name].
func Apply[I, O any](d *Dataset[I], f *Func[I, O], opts ...Option) *Dataset[O] {
	if f == nil {
		return failed[O](badArg("Apply: nil Func (make one with NewMapFunc, NewFilterFunc, NewFlatMapFunc or NewBatchFunc)"))
	}
	return operator(d, f.name, func(r *run, o *opState, cfg *config) (kernel[I, O], error) {
		switch c := cfg.compute.(type) {
		case nil:
			return f.local, nil
		case tasksCompute:
			if f.task == nil {
				return nil, badArg("Apply: OnTasks needs a registered function (NewMapFunc, NewFilterFunc, NewFlatMapFunc or NewBatchFunc); %s is a plain function that can only run in the driver", f.name)
			}
			return func(ctx context.Context, rows []I) (result[O], error) {
				w, err := f.task.Remote(ctx, c.c, rows, c.opts...).Get(ctx)
				if err != nil {
					return result[O]{}, err
				}
				return fromWire(w), nil
			}, nil
		default:
			return nil, backend.Errorf(backend.Internal, "", "data: unknown compute %T", c)
		}
	}, f.owned, opts, f.fuse)
}

// Map adds an operator that applies fn to each row, in the driver's
// goroutines ([Concurrency] at once). A row for which fn fails is a bad
// row (see [SkipBadRows]). To run it as ray tasks, register it with
// [NewMapFunc] and use [Apply].
func Map[I, O any](d *Dataset[I], fn func(context.Context, I) (O, error), opts ...Option) *Dataset[O] {
	if fn == nil {
		return failed[O](badArg("Map: nil function"))
	}
	return Apply(d, &Func[I, O]{name: "map", local: mapKernel(fn, false), owned: mapKernel(fn, true), fuse: fuseKeeps}, opts...)
}

// Filter adds an operator that keeps the rows fn returns true for.
func Filter[T any](d *Dataset[T], fn func(context.Context, T) (bool, error), opts ...Option) *Dataset[T] {
	if fn == nil {
		return failed[T](badArg("Filter: nil function"))
	}
	return Apply(d, &Func[T, T]{name: "filter", local: filterKernel(fn, false), owned: filterKernel(fn, true), fuse: fuseKeeps}, opts...)
}

// FlatMap adds an operator that turns each row into zero or more rows. The
// in-flight caps count the rows it takes in, not the rows it makes.
func FlatMap[I, O any](d *Dataset[I], fn func(context.Context, I) ([]O, error), opts ...Option) *Dataset[O] {
	if fn == nil {
		return failed[O](badArg("FlatMap: nil function"))
	}
	return Apply(d, &Func[I, O]{name: "flat_map", local: flatMapKernel(fn), fuse: fuseGrows}, opts...)
}

// MapBatches adds an operator that applies fn to batches of [BatchSize]
// rows (the last batch may be smaller). fn may return any number of rows;
// an error fails the whole batch (each of its rows is a bad row).
func MapBatches[I, O any](d *Dataset[I], fn func(context.Context, []I) ([]O, error), opts ...Option) *Dataset[O] {
	if fn == nil {
		return failed[O](badArg("MapBatches: nil function"))
	}
	return Apply(d, &Func[I, O]{name: "map_batches", local: batchKernel(fn), fuse: fuseGrows}, opts...)
}

// mapKernel applies fn to each row; with inPlace, when I and O are one
// type, its output overwrites the rows given (which the caller owns).
func mapKernel[I, O any](fn func(context.Context, I) (O, error), inPlace bool) kernel[I, O] {
	return func(ctx context.Context, rows []I) (result[O], error) {
		var r result[O]
		if same, ok := any(rows).([]O); inPlace && ok {
			r.out = same[:0] // row i is read before out[i] (or an earlier one) is written
		} else {
			r.out = make([]O, 0, len(rows))
		}
		// Until a row fails, a tight loop: one output per row.
		out := r.out[:len(rows)]
		i := 0
		var err error
		for ; i < len(rows); i++ {
			var v O
			if v, err = fn(ctx, rows[i]); err != nil {
				break
			}
			out[i] = v
		}
		r.out = out[:i]
		if i == len(rows) {
			return r, nil
		}
		// Row i failed: from here on, count each row's outputs.
		r.perRow = make([]int32, len(rows))
		for j := range i {
			r.perRow[j] = 1
		}
		r.failed = append(r.failed, failure{i, err})
		for i++; i < len(rows); i++ {
			v, err := fn(ctx, rows[i])
			if err != nil {
				r.failed = append(r.failed, failure{i, err})
				continue
			}
			r.out = append(r.out, v)
			r.perRow[i] = 1
		}
		return r, nil
	}
}

// filterKernel keeps the rows fn returns true for; with inPlace, over
// the rows given (which the caller owns). Once a row is dropped, sel
// lists the rows kept.
func filterKernel[T any](fn func(context.Context, T) (bool, error), inPlace bool) kernel[T, T] {
	return func(ctx context.Context, rows []T) (result[T], error) {
		var r result[T]
		var out []T
		if inPlace {
			out = rows // row i is read before out[i] (or an earlier one) is written
		} else {
			out = make([]T, len(rows))
		}
		// Until a row is dropped or fails, a tight loop: every row kept.
		i := 0
		keep, err := true, error(nil)
		for ; i < len(rows); i++ {
			if keep, err = fn(ctx, rows[i]); err != nil || !keep {
				break
			}
			out[i] = rows[i]
		}
		n := i
		if i < len(rows) {
			// Row i was dropped or failed (keep, err say which): from here
			// on, sel lists the rows kept, the ones before i included.
			sel := make([]int32, len(rows))
			for j := range i {
				sel[j] = int32(j)
			}
			for {
				switch {
				case err != nil:
					r.failed = append(r.failed, failure{i, err})
				case keep:
					out[n] = rows[i]
					sel[n] = int32(i)
					n++
				}
				if i++; i == len(rows) {
					break
				}
				keep, err = fn(ctx, rows[i])
			}
			r.sel = sel[:n]
		}
		r.out = out[:n]
		if inPlace {
			clear(rows[n:]) // what the rows dropped point to can go
		}
		return r, nil
	}
}

func flatMapKernel[I, O any](fn func(context.Context, I) ([]O, error)) kernel[I, O] {
	return func(ctx context.Context, rows []I) (result[O], error) {
		r := result[O]{perRow: make([]int32, len(rows))}
		for i, row := range rows {
			vs, err := fn(ctx, row)
			if err != nil {
				r.failed = append(r.failed, failure{i, err})
				continue
			}
			r.out = append(r.out, vs...)
			r.perRow[i] = int32(len(vs))
		}
		return r, nil
	}
}

func batchKernel[I, O any](fn func(context.Context, []I) ([]O, error)) kernel[I, O] {
	return func(ctx context.Context, rows []I) (result[O], error) {
		out, err := fn(ctx, rows)
		if err != nil {
			return result[O]{}, err
		}
		return result[O]{out: out}, nil
	}
}
