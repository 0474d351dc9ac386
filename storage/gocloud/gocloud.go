// Package gocloud adapts gocloud.dev/blob buckets (Google Cloud Storage,
// Amazon S3, Azure Blob Storage and every other gocloud.dev driver) to
// storage.Bucket, so that package train can keep checkpoints and package
// data can read datasets in them.
//
// Importing it registers the gs, s3 and azblob URL schemes with
// storage.Open (and so with train.RunConfig.Storage); import the
// gocloud.dev driver of your store too:
//
//	import (
//		_ "github.com/goray-dev/goray/storage/gocloud"
//		_ "gocloud.dev/blob/gcsblob"
//	)
//
//	cfg.Run.Storage = "gs://my-bucket/checkpoints"
//
// Or wrap a bucket you opened yourself with [Bucket]. This is a module of
// its own (github.com/goray-dev/goray/storage/gocloud) so that programs
// that do not use cloud storage do not build gocloud.dev's gRPC and
// OpenTelemetry dependencies.
package gocloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/goray-dev/goray/storage"
)

// Schemes are the URL schemes this package registers with storage.Open.
var Schemes = []string{"gs", "s3", "azblob"}

func init() {
	for _, s := range Schemes {
		storage.Register(s, Open)
	}
}

// Open opens u with blob.OpenBucket (the driver of its scheme must be
// imported) and wraps it with [Bucket]; the returned bucket closes it. A
// path after the bucket name ("gs://bucket/dir") becomes a key prefix.
func Open(ctx context.Context, u *url.URL) (storage.Bucket, error) {
	prefix := strings.Trim(u.Path, "/")
	v := *u
	v.Path = ""
	b, err := blob.OpenBucket(ctx, v.String())
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return &bucket{b: b, own: true}, nil
}

// Bucket wraps b. Closing the result does not close b: whoever opened b
// closes it.
func Bucket(b *blob.Bucket) storage.Bucket { return &bucket{b: b} }

type bucket struct {
	b   *blob.Bucket
	own bool
}

// wrap maps gocloud.dev's NotFound to storage.ErrNotExist.
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("storage: %s %q: %w: %w", op, key, storage.ErrNotExist, err)
	}
	return fmt.Errorf("storage: %s %q: %w", op, key, err)
}

func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := storage.ValidKey(key); err != nil {
		return nil, err
	}
	r, err := b.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, wrap("read", key, err)
	}
	return r, nil
}

func (b *bucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	if err := storage.ValidKey(key); err != nil {
		return nil, err
	}
	w, err := b.b.NewWriter(ctx, key, nil)
	if err != nil {
		return nil, wrap("write", key, err)
	}
	return &writer{ctx: ctx, w: w, key: key}, nil
}

// writer reports a cancelled write as the context's error, as storage.Bucket
// promises (gocloud.dev's own error for it varies by driver).
type writer struct {
	ctx context.Context
	w   *blob.Writer
	key string
}

func (w *writer) Write(p []byte) (int, error) { return w.w.Write(p) }

func (w *writer) Close() error {
	err := w.w.Close()
	if cerr := w.ctx.Err(); cerr != nil {
		return cerr
	}
	return wrap("write", w.key, err)
}

func (b *bucket) Stat(ctx context.Context, key string) (storage.Object, error) {
	if err := storage.ValidKey(key); err != nil {
		return storage.Object{}, err
	}
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return storage.Object{}, wrap("stat", key, err)
	}
	return storage.Object{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[storage.Object, error] {
	return func(yield func(storage.Object, error) bool) {
		it := b.b.List(&blob.ListOptions{Prefix: prefix})
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(storage.Object{}, wrap("list", prefix, err))
				return
			}
			if obj.IsDir {
				continue
			}
			if !yield(storage.Object{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime}, nil) {
				return
			}
		}
	}
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	if err := storage.ValidKey(key); err != nil {
		return err
	}
	err := b.b.Delete(ctx, key)
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		// Some drivers report a key that names a folder, not an object,
		// with another code (fileblob: "directory not empty").
		if ok, xerr := b.b.Exists(ctx, key); xerr == nil && !ok {
			return fmt.Errorf("storage: delete %q: %w: %w", key, storage.ErrNotExist, err)
		}
	}
	return wrap("delete", key, err)
}

func (b *bucket) Close() error {
	if !b.own {
		return nil
	}
	return b.b.Close()
}
