package data_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
)

func Example() {
	ctx := context.Background()
	words := data.FromItems([]string{"tpu", "slice", "", "host", "chip"})
	nonEmpty := data.Filter(words, func(_ context.Context, w string) (bool, error) { return w != "", nil })
	upper := data.Map(nonEmpty, func(_ context.Context, w string) (string, error) { return strings.ToUpper(w), nil })
	for w, err := range data.Rows(ctx, upper) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(w)
	}
	// Output:
	// TPU
	// SLICE
	// HOST
	// CHIP
}

func ExampleMapBatches() {
	ctx := context.Background()
	sums := data.MapBatches(data.Range(10), func(_ context.Context, xs []int) ([]int, error) {
		s := 0
		for _, x := range xs {
			s += x
		}
		return []int{s}, nil
	}, data.BatchSize(4))
	got, err := data.Take(ctx, sums, 10)
	fmt.Println(got, err)
	// Output: [6 22 17] <nil>
}

func ExampleSkipBadRows() {
	ctx := context.Background()
	parse := func(_ context.Context, s string) (int, error) {
		var n int
		_, err := fmt.Sscan(s, &n)
		return n, err
	}
	ds := data.Map(data.FromItems([]string{"1", "two", "3"}), parse)
	_, err := data.Count(ctx, ds)
	fmt.Println(err)
	var st data.Stats
	n, err := data.Count(ctx, ds, data.SkipBadRows(5), data.CollectStats(&st))
	fmt.Println(n, err, st.BadRows[0].Pos)
	// Output:
	// data: map: bad row at items row 1: expected integer
	// 2 <nil> items row 1
}

// squareOnTasks is registered at package initialization so that worker
// processes can run it.
var squareOnTasks = data.NewMapFunc("data_example.square", func(_ context.Context, x int) (int, error) { return x * x, nil })

func ExampleApply() {
	ctx := context.Background()
	b, _ := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2, Resources: backend.Resources{backend.CPU: 4}}}}, nil)
	c, _ := ray.NewCluster(ctx, b, nil)
	defer c.Close()
	got, err := data.Take(ctx, data.Apply(data.Range(5), squareOnTasks, data.OnTasks(c)), 5)
	fmt.Println(got, err)
	// Output: [0 1 4 9 16] <nil>
}

func ExampleApplyPool() {
	ctx := context.Background()
	b, _ := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 2}}}, nil)
	c, _ := ray.NewCluster(ctx, b, nil)
	defer c.Close()
	pool := data.Pool[*scaler, int]{
		Cluster: c, Class: scalerClass, Arg: 10, Min: 1, Max: 2,
		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"}, // one slice per actor
	}
	got, err := data.Take(ctx, data.ApplyPool(data.Range(5), pool, scaleMethod, data.BatchSize(2)), 5)
	fmt.Println(got, err)
	states, _ := ray.TPUSlices(ctx, c)
	for _, s := range states {
		fmt.Println(s.Name, "reserved:", s.ReservedBy != 0)
	}
	// Output:
	// [0 10 20 30 40] <nil>
	// v6e-4-0 reserved: false
	// v6e-4-1 reserved: false
}

func ExampleReadText() {
	ctx := context.Background()
	logs := storage.NewMem()
	defer logs.Close()
	_ = storage.WriteAll(ctx, logs, "logs/a.txt", []byte("boot\r\n\nready\n"))
	_ = storage.WriteAll(ctx, logs, "logs/b.txt", []byte("done"))
	lines, err := data.Take(ctx, data.ReadText(data.InBucket(logs, "logs/*.txt")), 10)
	fmt.Println(lines, err)
	files, err := data.Take(ctx, data.ReadBinaryFiles(data.InBucket(logs, "logs")), 10)
	for _, f := range files {
		fmt.Println(f.Path, len(f.Bytes))
	}
	fmt.Println(err)
	// Output:
	// [boot ready done] <nil>
	// logs/a.txt 13
	// logs/b.txt 4
	// <nil>
}
