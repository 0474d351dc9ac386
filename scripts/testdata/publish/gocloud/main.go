// Command gocloud is check-publish.sh's program on storage/gocloud: an
// object written to and read back from a gocloud.dev mem:// bucket.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/url"

	_ "gocloud.dev/blob/memblob"

	"github.com/goray-dev/goray/storage/gocloud"
)

func main() {
	ctx := context.Background()
	u, _ := url.Parse("mem://")
	b, err := gocloud.Open(ctx, u)
	if err != nil {
		log.Fatal(err)
	}
	w, err := b.NewWriter(ctx, "ckpt/a")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.WriteString(w, "hello"); err != nil {
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	r, err := b.NewRangeReader(ctx, "ckpt/a", 0, -1)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("gocloud ok:", string(got))
}
