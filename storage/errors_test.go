package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/storage"
)

// TestErrorCodes: every error of the built-in buckets and of Open carries
// a code of goray's closed set (before, all were Unknown), with its
// sentinel (ErrNotExist, ErrClosed) still matched by errors.Is and its
// message naming what to do.
func TestErrorCodes(t *testing.T) {
	ctx := context.Background()
	type bucketCase struct {
		name string
		run  func(t *testing.T, b storage.Bucket) error
		code backend.Code
		is   error // errors.Is target, if any
	}
	bucketCases := []bucketCase{
		{"read missing", func(t *testing.T, b storage.Bucket) error { _, err := storage.ReadAll(ctx, b, "none"); return err }, backend.NotFound, storage.ErrNotExist},
		{"stat missing", func(t *testing.T, b storage.Bucket) error { _, err := b.Stat(ctx, "none"); return err }, backend.NotFound, storage.ErrNotExist},
		{"delete missing", func(t *testing.T, b storage.Bucket) error { return b.Delete(ctx, "none") }, backend.NotFound, storage.ErrNotExist},
		{"empty key", func(t *testing.T, b storage.Bucket) error { return storage.WriteAll(ctx, b, "", nil) }, backend.InvalidArgument, nil},
		{"dot-dot key", func(t *testing.T, b storage.Bucket) error { _, err := b.Stat(ctx, "a/../b"); return err }, backend.InvalidArgument, nil},
		{"negative offset", func(t *testing.T, b storage.Bucket) error {
			if err := storage.WriteAll(ctx, b, "k", []byte("v")); err != nil {
				return err
			}
			_, err := b.NewRangeReader(ctx, "k", -1, 1)
			return err
		}, backend.InvalidArgument, nil},
		{"write after close", func(t *testing.T, b storage.Bucket) error {
			w, err := b.NewWriter(ctx, "k")
			if err != nil {
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
			_, err = w.Write([]byte("late"))
			return err
		}, backend.FailedPrecondition, nil},
		{"closed bucket", func(t *testing.T, b storage.Bucket) error {
			if err := b.Close(); err != nil {
				return err
			}
			_, err := b.Stat(ctx, "k")
			return err
		}, backend.FailedPrecondition, storage.ErrClosed},
		{"cancelled", func(t *testing.T, b storage.Bucket) error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := b.Stat(cctx, "k")
			return err
		}, backend.Canceled, context.Canceled},
	}
	buckets := map[string]func(t *testing.T) storage.Bucket{
		"file": func(t *testing.T) storage.Bucket {
			b, err := storage.Dir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"mem": func(t *testing.T) storage.Bucket { return storage.NewMem() },
	}
	for bname, newBucket := range buckets {
		for _, tc := range bucketCases {
			t.Run(bname+"/"+tc.name, func(t *testing.T) {
				is := is.New(t)
				b := newBucket(t)
				defer b.Close()
				err := tc.run(t, b)
				is.True(err != nil)
				is.Equal(backend.CodeOf(err), tc.code)
				if tc.is != nil {
					is.True(errors.Is(err, tc.is)) // the sentinel still matches
				}
			})
		}
	}

	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	openCases := []struct {
		url  string
		code backend.Code
		msg  string // in the message
	}{
		{"gs://my-bucket/ckpt", backend.FailedPrecondition, `"github.com/goray-dev/goray/storage/gocloud" and _ "gocloud.dev/blob/gcsblob"`},
		{"s3://my-bucket", backend.FailedPrecondition, `"gocloud.dev/blob/s3blob"`},
		{"azblob://container", backend.FailedPrecondition, `"gocloud.dev/blob/azureblob"`},
		{"nosuch://x", backend.InvalidArgument, "registered: [file mem]"},
		{"relative/dir", backend.InvalidArgument, "neither a URL nor an absolute path"},
		{"file://host/dir", backend.InvalidArgument, "host \"host\" is not allowed"},
		{"file://", backend.InvalidArgument, "needs an absolute path"},
		{"%zz", backend.InvalidArgument, "invalid URL escape"},
		{file, backend.InvalidArgument, "is a file, not a directory"},
	}
	for _, tc := range openCases {
		t.Run("Open "+tc.url, func(t *testing.T) {
			is := is.New(t)
			_, err := storage.Open(ctx, tc.url)
			is.Equal(backend.CodeOf(err), tc.code)
			is.True(strings.Contains(err.Error(), tc.msg)) // names the problem and the fix
		})
	}
}

// TestErrorCodeOfAFileInTheWay: a write whose key needs a directory where
// an object is ("a/b" when "a" is an object) fails with AlreadyExists,
// not Unknown.
func TestErrorCodeOfAFileInTheWay(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	b, err := storage.Dir(t.TempDir())
	is.NoErr(err)
	defer b.Close()
	is.NoErr(storage.WriteAll(ctx, b, "a", []byte("file")))
	err = storage.WriteAll(ctx, b, "a/b", []byte("under a file"))
	is.Equal(backend.CodeOf(err), backend.AlreadyExists)
}
