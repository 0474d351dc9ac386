package gocloud_test

import (
	"context"
	"fmt"
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/storage/gocloud"
)

// BenchmarkWriteRead writes and reads back one object per op through the
// built-in file:// bucket and through gocloud.dev's fileblob (the baseline,
// what train and data used before), on the same disk in the same run.
//
//	go test -run '^$' -bench WriteRead -benchmem -count 3 .
func BenchmarkWriteRead(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{4 << 10, 1 << 20} {
		data := make([]byte, size)
		for _, impl := range []struct {
			name string
			open func(dir string) storage.Bucket
		}{
			{"storage.Dir", func(dir string) storage.Bucket {
				bk, err := storage.Dir(dir)
				if err != nil {
					b.Fatal(err)
				}
				return bk
			}},
			{"gocloud-fileblob", func(dir string) storage.Bucket {
				bk, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
				if err != nil {
					b.Fatal(err)
				}
				return gocloud.Bucket(bk)
			}},
		} {
			b.Run(fmt.Sprintf("size=%dKiB/%s", size>>10, impl.name), func(b *testing.B) {
				bk := impl.open(b.TempDir())
				b.SetBytes(int64(size))
				for i := 0; b.Loop(); i++ {
					key := fmt.Sprintf("run/checkpoint_%09d/rank_00000", i%64)
					if err := storage.WriteAll(ctx, bk, key, data); err != nil {
						b.Fatal(err)
					}
					if _, err := storage.ReadAll(ctx, bk, key); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
