package storage_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
)

// A file:// bucket stays inside its directory: a List prefix cannot climb
// out of it, and a symlink inside it that points outside is never
// followed to read, write, delete or list what lies outside.
func TestDirStaysInside(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	is.NoErr(os.MkdirAll(outside, 0o755))
	is.NoErr(os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o644))
	dir := filepath.Join(base, "bucket")
	is.NoErr(os.MkdirAll(dir, 0o755))
	is.NoErr(os.Symlink(outside, filepath.Join(dir, "link")))                          // a directory outside
	is.NoErr(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "file"))) // a file outside
	b, err := storage.Dir(dir)
	is.NoErr(err)
	defer b.Close()
	is.NoErr(storage.WriteAll(ctx, b, "inside/a", []byte("a")))

	// List: a prefix that climbs out is refused; nothing outside is listed.
	for _, prefix := range []string{"../", "../outside/", "inside/../../", "a/../../"} {
		var keys []string
		var lerr error
		for o, err := range b.List(ctx, prefix) {
			if err != nil {
				lerr = err
				break
			}
			keys = append(keys, o.Key)
		}
		is.True(lerr != nil) // the prefix is refused
		is.True(strings.Contains(lerr.Error(), "invalid prefix"))
		is.Equal(len(keys), 0)
	}
	var all []string
	for o, err := range b.List(ctx, "") {
		is.NoErr(err)
		all = append(all, o.Key)
	}
	is.Equal(all, []string{"inside/a"}) // symlinks are not objects

	// Through the symlinks: no read, no write, no delete outside.
	for _, key := range []string{"link/secret", "file"} {
		_, err := storage.ReadAll(ctx, b, key)
		is.True(err != nil)
		_, err = b.Stat(ctx, key)
		is.True(err != nil)
		is.True(b.Delete(ctx, key) != nil)
	}
	is.True(storage.WriteAll(ctx, b, "link/new", []byte("x")) != nil)
	_, err = os.Stat(filepath.Join(outside, "new"))
	is.True(os.IsNotExist(err))
	got, err := os.ReadFile(filepath.Join(outside, "secret"))
	is.NoErr(err)
	is.Equal(string(got), "s3cret") // untouched
	entries, err := os.ReadDir(outside)
	is.NoErr(err)
	is.Equal(len(entries), 1)
	r, err := b.NewRangeReader(ctx, "inside/a", 0, -1)
	is.NoErr(err)
	data, _ := io.ReadAll(r)
	r.Close()
	is.Equal(string(data), "a")
}
