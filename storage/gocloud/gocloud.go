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
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/goray-dev/goray/backend"
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
	if !blob.DefaultURLMux().ValidBucketScheme(u.Scheme) {
		return nil, backend.Errorf(backend.FailedPrecondition, "", "no gocloud.dev driver for scheme %q in this program: add import _ %q", u.Scheme, cmp.Or(drivers[u.Scheme], "gocloud.dev/blob/<driver>"))
	}
	b, err := blob.OpenBucket(ctx, v.String())
	if err != nil {
		return nil, &backend.Error{Code: codeOf(err), Err: err}
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

// wrap gives err the goray code of its gocloud.dev code (codeOf) and maps
// NotFound to storage.ErrNotExist.
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if gcerrors.Code(err) == gcerrors.NotFound {
		return &backend.Error{Code: backend.NotFound, Err: fmt.Errorf("storage: %s %q: %w: %w", op, key, storage.ErrNotExist, err)}
	}
	return &backend.Error{Code: codeOf(err), Err: fmt.Errorf("storage: %s %q: %w", op, key, err)}
}

// codeOf maps gocloud.dev's error codes to goray's closed set; a context
// error keeps its code, and what gocloud.dev cannot classify (Unknown) is
// Unavailable, a failure of the store.
func codeOf(err error) backend.Code {
	if c := backend.CodeOf(err); c != backend.Unknown {
		return c
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return backend.NotFound
	case gcerrors.AlreadyExists:
		return backend.AlreadyExists
	case gcerrors.InvalidArgument:
		return backend.InvalidArgument
	case gcerrors.FailedPrecondition, gcerrors.PermissionDenied:
		return backend.FailedPrecondition
	case gcerrors.ResourceExhausted:
		return backend.ResourceExhausted
	case gcerrors.Unimplemented:
		return backend.Unimplemented
	case gcerrors.Canceled:
		return backend.Canceled
	case gcerrors.DeadlineExceeded:
		return backend.DeadlineExceeded
	case gcerrors.Internal:
		return backend.Internal
	}
	return backend.Unavailable
}

// drivers names the gocloud.dev driver package of each scheme.
var drivers = map[string]string{"gs": "gocloud.dev/blob/gcsblob", "s3": "gocloud.dev/blob/s3blob", "azblob": "gocloud.dev/blob/azureblob"}

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

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	return n, wrap("write", w.key, err)
}

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
			return &backend.Error{Code: backend.NotFound, Err: fmt.Errorf("storage: delete %q: %w: %w", key, storage.ErrNotExist, err)}
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
