package parquet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/data/parquet"
)

type Score struct {
	Review string  `parquet:"review"`
	Score  float64 `parquet:"score"`
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "parquet-example")
	defer os.RemoveAll(dir)
	out := data.LocalFiles(filepath.Join(dir, "scores.parquet"))

	scores := data.Map(data.FromItems([]string{"great", "meh", "awful"}), func(_ context.Context, r string) (Score, error) {
		return Score{Review: r, Score: float64(len(r)) / 5}, nil
	})
	if err := parquet.Write(ctx, scores, out); err != nil {
		fmt.Println(err)
		return
	}
	for s, err := range data.Rows(ctx, parquet.Read[Score](out)) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s %.1f\n", s.Review, s.Score)
	}
	// Output:
	// great 1.0
	// meh 0.6
	// awful 1.0
}
