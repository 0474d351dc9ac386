package data_test

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/goray-dev/goray/data"
)

type sale struct {
	Shop  string
	Item  string
	Price float64
}

var sales = []sale{
	{"lyon", "tea", 4}, {"oslo", "tea", 6}, {"lyon", "cake", 9},
	{"oslo", "bread", 3}, {"lyon", "tea", 5}, {"kyiv", "cake", 7},
}

func ExampleSort() {
	ctx := context.Background()
	byPrice := data.Sort(data.FromItems(sales), func(a, b sale) int { return cmp.Compare(a.Price, b.Price) })
	got, err := data.Take(ctx, byPrice, 3)
	fmt.Println(got, err)
	// Output: [{oslo bread 3} {lyon tea 4} {lyon tea 5}] <nil>
}

func ExampleSortBy() {
	ctx := context.Background()
	// Stable: shops of equal name keep their input order. MemoryBudget
	// bounds what the sort holds; beyond it, it spills to a temporary
	// directory and merges.
	byShop := data.SortBy(data.FromItems(sales), func(s sale) string { return s.Shop }, data.Descending())
	for s, err := range data.Rows(ctx, byShop, data.MemoryBudget(64<<20)) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(s.Shop, s.Item)
	}
	// Output:
	// oslo tea
	// oslo bread
	// lyon tea
	// lyon cake
	// lyon tea
	// kyiv cake
}

func ExampleGroupBy() {
	ctx := context.Background()
	shop := func(s sale) string { return s.Shop }
	ds := data.FromItems(sales)

	counts, _ := data.Take(ctx, data.GroupBy(ds, shop, data.CountOf[sale]()), 10)
	fmt.Println(counts)
	means, _ := data.Take(ctx, data.GroupBy(ds, shop, data.MeanOf(func(s sale) float64 { return s.Price })), 10)
	fmt.Println(means)
	top, _ := data.Take(ctx, data.GroupBy(ds, shop, data.MaxOf(func(s sale) float64 { return s.Price })), 10)
	fmt.Println(top)

	// A user-defined aggregation: the items a shop sells, once each, in
	// the order first sold.
	type items struct{ List []string }
	distinct := data.Agg[sale, items, string]{
		Add: func(a items, s sale) items {
			if !strings.Contains(" "+strings.Join(a.List, " ")+" ", " "+s.Item+" ") {
				a.List = append(a.List, s.Item)
			}
			return a
		},
		Merge:  func(a, b items) items { return items{append(a.List, b.List...)} },
		Result: func(a items) string { return strings.Join(a.List, "+") },
	}
	menus, err := data.Take(ctx, data.GroupBy(ds, shop, distinct), 10)
	fmt.Println(menus, err)
	// Output:
	// [{kyiv 1} {lyon 3} {oslo 2}]
	// [{kyiv 7} {lyon 6} {oslo 4.5}]
	// [{kyiv 7} {lyon 9} {oslo 6}]
	// [{kyiv cake} {lyon tea+cake} {oslo tea+bread}] <nil>
}

func ExampleMapGroups() {
	ctx := context.Background()
	// The most expensive sale of each shop: the whole group is at hand.
	best := data.MapGroups(data.FromItems(sales), func(s sale) string { return s.Shop },
		func(_ context.Context, shop string, group []sale) ([]string, error) {
			top := group[0]
			for _, s := range group[1:] {
				if s.Price > top.Price {
					top = s
				}
			}
			return []string{fmt.Sprintf("%s: %s of %d", shop, top.Item, len(group))}, nil
		})
	got, err := data.Take(ctx, best, 10)
	fmt.Println(strings.Join(got, ", "), err)
	// Output: kyiv: cake of 1, lyon: cake of 3, oslo: tea of 2 <nil>
}

func ExampleJoin() {
	ctx := context.Background()
	type city struct {
		Shop    string
		Country string
	}
	cities := data.FromItems([]city{{"lyon", "FR"}, {"oslo", "NO"}, {"rome", "IT"}})
	shop := func(s sale) string { return s.Shop }
	cityShop := func(c city) string { return c.Shop }

	inner, _ := data.Take(ctx, data.Join(data.FromItems(sales), cities, shop, cityShop), 10)
	for _, j := range inner {
		fmt.Println(j.Left.Shop, j.Left.Item, j.Right.Country)
	}
	left, err := data.Take(ctx, data.LeftJoin(data.FromItems(sales), cities, shop, cityShop), 1)
	fmt.Println(left[0].Left.Shop, left[0].Matched, err) // kyiv has no city
	// Output:
	// lyon tea FR
	// lyon cake FR
	// lyon tea FR
	// oslo tea NO
	// oslo bread NO
	// kyiv false <nil>
}

func ExampleRandomShuffle() {
	ctx := context.Background()
	ds := data.Range(10)
	a, _ := data.Take(ctx, data.RandomShuffle(ds, 42), 10)
	b, _ := data.Take(ctx, data.RandomShuffle(ds, 42), 10)
	c, _ := data.Take(ctx, data.RandomShuffle(ds, 43), 10)
	fmt.Println(len(a), fmt.Sprint(a) == fmt.Sprint(b), fmt.Sprint(a) == fmt.Sprint(c))
	// Output: 10 true false
}

func ExampleRepartition() {
	ctx := context.Background()
	sizes := data.MapBatches(data.Repartition(data.Range(10), 3), func(_ context.Context, block []int) ([]int, error) {
		return []int{len(block)}, nil
	})
	got, err := data.Take(ctx, sizes, 10)
	fmt.Println(got, err)
	// Output: [4 3 3] <nil>
}

func ExampleUnion() {
	ctx := context.Background()
	got, err := data.Take(ctx, data.Union(data.Range(3), data.FromItems([]int{10, 11})), 10)
	fmt.Println(got, err)
	// Output: [0 1 2 10 11] <nil>
}

func ExampleLimit() {
	ctx := context.Background()
	// The source would give a trillion rows; Limit stops it after 4.
	n, err := data.Count(ctx, data.Limit(data.Range(1e12), 4))
	fmt.Println(n, err)
	// Output: 4 <nil>
}

func ExampleSplit() {
	ctx := context.Background()
	// Three train workers, each reading its own shard of 10 rows; with
	// Equal each gets 3 and row 9 is dropped.
	shards, err := data.Split(ctx, data.Range(10), 3, data.Equal())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer shards.Close()
	got := make([][]int, shards.N())
	var wg sync.WaitGroup
	for i := range shards.N() {
		wg.Go(func() {
			for x, err := range shards.Shard(i) {
				if err != nil {
					fmt.Println(err)
					return
				}
				got[i] = append(got[i], x)
			}
		})
	}
	wg.Wait()
	fmt.Println(got, shards.Wait())

	// Worker 1 restarts after 2 rows: its shard, read alone, from there.
	rest, err := data.Take(ctx, data.Skip(data.Shard(data.Range(10), 3, 1, data.Equal()), 2), 10)
	fmt.Println(rest, err)
	// Output:
	// [[0 3 6] [1 4 7] [2 5 8]] <nil>
	// [7] <nil>
}
