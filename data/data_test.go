package data_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) {
	ray.Main()
	goleak.VerifyTestMain(m)
}

func square(_ context.Context, x int) (int, error) { return x * x, nil }

func even(_ context.Context, x int) (bool, error) { return x%2 == 0, nil }

func twice(_ context.Context, x int) ([]int, error) { return []int{x, x}, nil }

func sum(_ context.Context, xs []int) ([]int, error) {
	s := 0
	for _, x := range xs {
		s += x
	}
	return []int{s}, nil
}

func want(n int, f func(int) []int) []int {
	var out []int
	for i := range n {
		out = append(out, f(i)...)
	}
	return out
}

func TestOperators(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		ds   *data.Dataset[int]
		opts []data.Option
		want []int
	}{
		{"range", data.Range(1000), nil, want(1000, func(i int) []int { return []int{i} })},
		{"items", data.FromItems([]int{3, 1, 2}), nil, []int{3, 1, 2}},
		{"empty", data.Range(0), nil, nil},
		{"map", data.Map(data.Range(1000), square), nil, want(1000, func(i int) []int { return []int{i * i} })},
		{"filter", data.Filter(data.Range(1000), even), nil, want(1000, func(i int) []int {
			if i%2 == 0 {
				return []int{i}
			}
			return nil
		})},
		{"flat_map", data.FlatMap(data.Range(500), twice), nil, want(500, func(i int) []int { return []int{i, i} })},
		{"map_batches", data.MapBatches(data.Range(10), sum, data.BatchSize(4)), nil, []int{0 + 1 + 2 + 3, 4 + 5 + 6 + 7, 8 + 9}},
		{"small blocks", data.Map(data.Range(1000, data.BlockRows(7)), square, data.Concurrency(8)), nil, want(1000, func(i int) []int { return []int{i * i} })},
		{"chain", data.MapBatches(data.Filter(data.Map(data.Range(100, data.BlockRows(3)), square), even), sum, data.BatchSize(10)), nil,
			[]int{0 + 4 + 16 + 36 + 64 + 100 + 144 + 196 + 256 + 324, 20*20 + 22*22 + 24*24 + 26*26 + 28*28 + 30*30 + 32*32 + 34*34 + 36*36 + 38*38,
				func() int {
					s := 0
					for i := 40; i < 60; i += 2 {
						s += i * i
					}
					return s
				}(), func() int {
					s := 0
					for i := 60; i < 80; i += 2 {
						s += i * i
					}
					return s
				}(), func() int {
					s := 0
					for i := 80; i < 100; i += 2 {
						s += i * i
					}
					return s
				}()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var got []int
			for v, err := range data.Rows(ctx, tt.ds, tt.opts...) {
				is.NoErr(err)
				got = append(got, v)
			}
			is.Equal(got, tt.want)
			n, err := data.Count(ctx, tt.ds, tt.opts...)
			is.NoErr(err)
			is.Equal(n, int64(len(tt.want)))
			if tt.name == "chain" {
				return // batches after a parallel operator form differently out of order
			}
			unordered, err := data.Take(ctx, tt.ds, len(tt.want), append(tt.opts, data.Unordered())...)
			is.NoErr(err)
			slices.Sort(unordered)
			sorted := slices.Clone(tt.want)
			slices.Sort(sorted)
			is.Equal(unordered, append([]int{}, sorted...))
		})
	}
}

func TestTakeStopsEarly(t *testing.T) {
	is := is.New(t)
	got, err := data.Take(context.Background(), data.Map(data.Range(1_000_000), square), 5)
	is.NoErr(err)
	is.Equal(got, []int{0, 1, 4, 9, 16})
}

func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		ds   *data.Dataset[int]
		opts []data.Option
		msg  string
	}{
		{"cap", data.Range(3), []data.Option{data.MaxRowsInFlight(0)}, "MaxRowsInFlight(0): must be at least 1"},
		{"batch over cap", data.MapBatches(data.Range(3), sum, data.BatchSize(10), data.MaxRowsInFlight(5)), nil, "batch size 10 is larger than MaxRowsInFlight(5)"},
		{"concurrency", data.Map(data.Range(3), square, data.Concurrency(0)), nil, "Concurrency(0): must be at least 1"},
		{"range", data.Range(-1), nil, "n must be 0 or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := data.Count(ctx, tt.ds, tt.opts...)
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), tt.msg)) // names what was wrong
		})
	}
}

// TestPanickingLoopBody stops the run when the loop body panics: the panic
// goes on to the caller and no goroutine is left (goleak).
func TestPanickingLoopBody(t *testing.T) {
	is := is.New(t)
	defer func() { is.Equal(recover(), "boom") }()
	for range data.Rows(context.Background(), data.Map(data.Range(1_000_000), square)) {
		panic("boom")
	}
}

// TestOperatorUnordered lets one operator emit out of order; the next
// operator, ordered, keeps the order it receives, and every row arrives.
func TestOperatorUnordered(t *testing.T) {
	is := is.New(t)
	ds := data.Map(data.Map(data.Range(5000, data.BlockRows(10)), square, data.Unordered(), data.Concurrency(4)), square)
	got, err := data.Take(context.Background(), ds, 10_000)
	is.NoErr(err)
	slices.Sort(got)
	is.Equal(got, want(5000, func(i int) []int { return []int{i * i * i * i} }))
}
