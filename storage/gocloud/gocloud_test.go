package gocloud_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/matryer/is"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/storage/gocloud"
	"github.com/goray-dev/goray/storage/storagetest"
)

func TestMemblob(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Bucket {
		b := memblob.OpenBucket(nil)
		t.Cleanup(func() { b.Close() })
		return gocloud.Bucket(b)
	})
}

func TestFileblob(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Bucket {
		b, err := fileblob.OpenBucket(t.TempDir(), &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return gocloud.Bucket(b)
	})
}

func TestSchemesRegistered(t *testing.T) {
	is := is.New(t)
	for _, s := range gocloud.Schemes {
		is.True(slices.Contains(storage.Schemes(), s))
	}
	// Without the gocloud.dev driver imported, the error says so: which
	// import to add, with a code (FailedPrecondition: the URL is fine, the
	// program lacks the driver).
	_, err := storage.Open(context.Background(), "gs://some-bucket")
	is.True(err != nil)
	t.Log(err)
	is.True(strings.Contains(err.Error(), `add import _ "gocloud.dev/blob/gcsblob"`))
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
}

// dirOpener opens a fileblob bucket on one directory for every URL,
// standing in for a cloud store.
type dirOpener struct{ dir string }

func (o *dirOpener) OpenBucketURL(context.Context, *url.URL) (*blob.Bucket, error) {
	return fileblob.OpenBucket(o.dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite})
}

// testOpener serves the scheme "gocloudtest", registered once per process
// (the mux refuses a second time), so that the test passes with -count=N.
var (
	testOpener         = &dirOpener{}
	registerTestScheme = sync.OnceFunc(func() { blob.DefaultURLMux().RegisterBucket("gocloudtest", testOpener) })
)

func TestOpenWithPrefix(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	testOpener.dir = dir
	registerTestScheme()
	u, err := url.Parse("gocloudtest://bucket/runs/")
	is.NoErr(err)
	b, err := gocloud.Open(ctx, u)
	is.NoErr(err)
	defer b.Close()
	is.NoErr(storage.WriteAll(ctx, b, "k", []byte("v")))
	got, err := os.ReadFile(filepath.Join(dir, "runs", "k")) // the URL's path is a key prefix
	is.NoErr(err)
	is.Equal(string(got), "v")
}
