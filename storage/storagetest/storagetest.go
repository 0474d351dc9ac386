// Package storagetest is the conformance suite for implementations of
// storage.Bucket: the built-in file:// and mem:// buckets run it, and so
// does the gocloud.dev/blob adapter; run it on your own store too. It
// checks error codes as well (backend.CodeOf: NotFound for a missing key,
// InvalidArgument for an invalid one), so that code branching on
// ray.CodeOf works on every store.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/storage"
)

// Run checks the storage.Bucket contract on fresh, empty buckets that
// open returns (one per subtest; Run closes each).
func Run(t *testing.T, open func(t *testing.T) storage.Bucket) {
	t.Helper()
	fresh := func(t *testing.T) storage.Bucket {
		b := open(t)
		t.Cleanup(func() { b.Close() })
		return b
	}
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		for _, key := range []string{"a", "dir/b", "dir/sub/c.json", "x y/ü"} {
			is.NoErr(storage.WriteAll(ctx, b, key, []byte("data of "+key)))
			got, err := storage.ReadAll(ctx, b, key)
			is.NoErr(err)
			is.Equal(string(got), "data of "+key)
			obj, err := b.Stat(ctx, key)
			is.NoErr(err)
			is.Equal(obj.Key, key)
			is.Equal(obj.Size, int64(len("data of "+key)))
		}
	})

	t.Run("EmptyObject", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		is.NoErr(storage.WriteAll(ctx, b, "empty", nil))
		got, err := storage.ReadAll(ctx, b, "empty")
		is.NoErr(err)
		is.Equal(len(got), 0)
		ok, err := storage.Exists(ctx, b, "empty")
		is.NoErr(err)
		is.True(ok)
	})

	t.Run("Overwrite", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		is.NoErr(storage.WriteAll(ctx, b, "k", []byte("first, longer value")))
		is.NoErr(storage.WriteAll(ctx, b, "k", []byte("second")))
		got, err := storage.ReadAll(ctx, b, "k")
		is.NoErr(err)
		is.Equal(string(got), "second")
	})

	t.Run("RangeReads", func(t *testing.T) {
		b := fresh(t)
		data := []byte("0123456789")
		if err := storage.WriteAll(ctx, b, "r", data); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			off, n int64
			want   string
		}{{0, -1, "0123456789"}, {3, 4, "3456"}, {8, -1, "89"}, {8, 10, "89"}, {0, 0, ""}, {10, -1, ""}} {
			t.Run(fmt.Sprintf("off=%d,n=%d", tt.off, tt.n), func(t *testing.T) {
				is := is.New(t)
				r, err := b.NewRangeReader(ctx, "r", tt.off, tt.n)
				is.NoErr(err)
				got, err := io.ReadAll(r)
				is.NoErr(err)
				is.NoErr(r.Close())
				is.Equal(string(got), tt.want)
			})
		}
	})

	t.Run("NotExist", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		is.NoErr(storage.WriteAll(ctx, b, "dir/present", []byte("x")))
		for _, key := range []string{"missing", "dir/missing", "dir"} {
			_, err := b.NewRangeReader(ctx, key, 0, -1)
			is.True(errors.Is(err, storage.ErrNotExist))    // read of a missing key
			is.Equal(backend.CodeOf(err), backend.NotFound) // its code
			_, err = b.Stat(ctx, key)
			is.True(errors.Is(err, storage.ErrNotExist))    // stat of a missing key
			is.Equal(backend.CodeOf(err), backend.NotFound) // its code
			err = b.Delete(ctx, key)
			is.True(errors.Is(err, storage.ErrNotExist))    // delete of a missing key
			is.Equal(backend.CodeOf(err), backend.NotFound) // its code
			ok, err := storage.Exists(ctx, b, key)
			is.NoErr(err)
			is.True(!ok)
		}
	})

	t.Run("InvalidKeysAreInvalidArgument", func(t *testing.T) {
		b := fresh(t)
		for _, key := range []string{"", "/abs", "trailing/", "a//b", "a/../b", "./a"} {
			is := is.New(t)
			_, err := b.NewRangeReader(ctx, key, 0, -1)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument) // read of an invalid key
			_, err = b.NewWriter(ctx, key)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument) // write of an invalid key
			_, err = b.Stat(ctx, key)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument) // stat of an invalid key
			err = b.Delete(ctx, key)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument) // delete of an invalid key
		}
	})

	t.Run("ListIsSortedAndFiltered", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		keys := []string{"run/ck_2/rank_1", "run/ck_10/rank_0", "run/ck_2/COMPLETE", "runner/x", "other", "run/a"}
		for _, k := range keys {
			is.NoErr(storage.WriteAll(ctx, b, k, []byte(k)))
		}
		list := func(prefix string) []string {
			var out []string
			for o, err := range b.List(ctx, prefix) {
				is.NoErr(err)
				out = append(out, o.Key)
			}
			return out
		}
		is.Equal(list("run/"), []string{"run/a", "run/ck_10/rank_0", "run/ck_2/COMPLETE", "run/ck_2/rank_1"})
		is.Equal(list("run"), []string{"run/a", "run/ck_10/rank_0", "run/ck_2/COMPLETE", "run/ck_2/rank_1", "runner/x"})
		is.Equal(list("run/ck_2/"), []string{"run/ck_2/COMPLETE", "run/ck_2/rank_1"})
		is.Equal(len(list("")), len(keys))
		is.Equal(len(list("nothing/")), 0)
		// Stopping early is allowed.
		for range b.List(ctx, "") {
			break
		}
	})

	t.Run("DeleteRemovesFromList", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		is.NoErr(storage.WriteAll(ctx, b, "d/1", []byte("1")))
		is.NoErr(storage.WriteAll(ctx, b, "d/2", []byte("2")))
		is.NoErr(b.Delete(ctx, "d/1"))
		var keys []string
		for o, err := range b.List(ctx, "d/") {
			is.NoErr(err)
			keys = append(keys, o.Key)
		}
		is.Equal(keys, []string{"d/2"})
	})

	t.Run("WriteIsInvisibleUntilClose", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		w, err := b.NewWriter(ctx, "pending")
		is.NoErr(err)
		_, err = w.Write([]byte("half"))
		is.NoErr(err)
		ok, err := storage.Exists(ctx, b, "pending")
		is.NoErr(err)
		is.True(!ok) // not visible before Close
		for o, err := range b.List(ctx, "") {
			is.NoErr(err)
			t.Errorf("List shows %q before its writer closed", o.Key)
		}
		is.NoErr(w.Close())
		got, err := storage.ReadAll(ctx, b, "pending")
		is.NoErr(err)
		is.Equal(string(got), "half")
	})

	t.Run("CancelledWriteLeavesNothing", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		is.NoErr(storage.WriteAll(ctx, b, "kept", []byte("old")))
		for _, key := range []string{"new", "kept"} {
			wctx, cancel := context.WithCancel(ctx)
			w, err := b.NewWriter(wctx, key)
			is.NoErr(err)
			_, err = w.Write([]byte("discarded"))
			is.NoErr(err)
			cancel()
			is.True(w.Close() != nil) // Close after cancel reports the cancellation
		}
		ok, err := storage.Exists(ctx, b, "new")
		is.NoErr(err)
		is.True(!ok)
		got, err := storage.ReadAll(ctx, b, "kept")
		is.NoErr(err)
		is.Equal(string(got), "old")
		var keys []string
		for o, err := range b.List(ctx, "") {
			is.NoErr(err)
			keys = append(keys, o.Key)
		}
		is.Equal(keys, []string{"kept"})
	})

	t.Run("ConcurrentWriters", func(t *testing.T) {
		is := is.New(t)
		b := fresh(t)
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				data := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
				errs <- storage.WriteAll(ctx, b, fmt.Sprintf("c/%02d", i), data)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			is.NoErr(err)
		}
		count := 0
		for o, err := range b.List(ctx, "c/") {
			is.NoErr(err)
			i := count
			is.Equal(o.Key, fmt.Sprintf("c/%02d", i))
			got, err := storage.ReadAll(ctx, b, o.Key)
			is.NoErr(err)
			is.Equal(strings.Count(string(got), string(rune('a'+i))), 1000+i)
			count++
		}
		is.Equal(count, n)
	})
}
