// Command parquet is check-publish.sh's program on data/parquet: rows
// written to a Parquet file and read back.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/data/parquet"
)

type row struct {
	Name  string  `parquet:"name"`
	Score float64 `parquet:"score"`
}

func main() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "publish-parquet")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f := data.LocalFiles(filepath.Join(dir, "rows.parquet"))
	if err := parquet.Write(ctx, data.FromItems([]row{{"a", 1.5}, {"b", 2.5}}), f); err != nil {
		log.Fatal(err)
	}
	rows, err := data.Take(ctx, parquet.Read[row](f), 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("parquet ok:", rows)
}
