package storage_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/goray-dev/goray/storage"
)

// Objects are written atomically and listed in key order.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "storage-example")
	defer os.RemoveAll(dir)

	b, err := storage.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	for _, key := range []string{"run/checkpoint_2/rank_0", "run/checkpoint_1/rank_0"} {
		if err := storage.WriteAll(ctx, b, key, []byte("weights")); err != nil {
			fmt.Println(err)
			return
		}
	}
	for obj, err := range b.List(ctx, "run/") {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(obj.Key, obj.Size)
	}

	_, err = storage.Open(ctx, "gs://my-bucket")
	fmt.Println(err != nil)
	// Output:
	// run/checkpoint_1/rank_0 7
	// run/checkpoint_2/rank_0 7
	// true
}
