// Package storage is the object-store interface through which package train
// keeps checkpoints and package data reads and writes datasets, with local
// disk (file://) and in-memory (mem://) buckets built in.
//
// # Buckets
//
// A [Bucket] holds objects under slash-separated keys ("run/checkpoint_7/
// rank_00000"). Writes are atomic: an object appears, complete, only when
// its writer's Close returns nil, so a reader never sees half an object and
// a crashed writer leaves nothing under the key. Open one by URL with
// [Open], or build one with [Dir] or [NewMem].
//
// # Cloud stores
//
// gs://, s3:// and azblob:// buckets come from the adapter module
// github.com/goray-dev/goray/storage/gocloud, which wraps any
// gocloud.dev/blob bucket as a [Bucket] and registers those schemes with
// [Register]. It is a module of its own so that programs that keep their
// checkpoints on local disk do not download or compile gocloud.dev's gRPC
// and OpenTelemetry dependencies. Any other store can be plugged in the same
// way, by implementing [Bucket] (package storagetest checks an
// implementation) and calling [Register].
//
// # Errors
//
// Every error of this package's buckets and of [Open] carries a code of
// goray's closed set (backend.Code; ray.CodeOf reads it), so that code can
// branch on what went wrong without matching messages:
//
//   - NotFound: no object at the key (errors.Is(err, ErrNotExist) also
//     holds);
//   - InvalidArgument: a bad key, prefix, offset or URL, a URL scheme no
//     driver exists for, a path that is a file, not a directory;
//   - FailedPrecondition: the bucket is closed (errors.Is(err, ErrClosed)),
//     a writer used after its Close, a scheme whose driver is not linked
//     in (gs://, s3://, azblob:// without importing storage/gocloud: the
//     message names the imports to add), permission denied;
//   - AlreadyExists: an object where a write needs a directory ("a/b"
//     when "a" is an object);
//   - ResourceExhausted: the disk is full;
//   - Canceled and DeadlineExceeded: the context ended;
//   - Unavailable: any other I/O failure of the underlying store.
//
// The code rides on the error; its message says what was wrong and, where
// it can, what to do (the import to add, the valid key syntax).
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// ErrNotExist is the error (under errors.Is) of reading, statting or
// deleting a key that holds no object. It is fs.ErrNotExist, so
// os.IsNotExist-style checks on errors.Is work too.
var ErrNotExist = fs.ErrNotExist

// ErrClosed is returned by the operations of a bucket after its Close
// (code FailedPrecondition).
var ErrClosed error = &backend.Error{Code: backend.FailedPrecondition, Err: errors.New("storage: bucket is closed")}

// Object describes one stored object.
type Object struct {
	// Key is the object's key.
	Key string
	// Size is its length in bytes.
	Size int64
	// ModTime is when it was last written.
	ModTime time.Time
}

// DebrisRemover is implemented by buckets in which an interrupted write
// can leave something behind: the file:// bucket (Dir), whose writer
// killed mid-write leaves its temporary file. RemoveDebris removes what
// writes that can no longer finish left under prefix and reports how
// many files it removed; train's checkpoint pruning calls it.
type DebrisRemover interface {
	RemoveDebris(ctx context.Context, prefix string) (int, error)
}

// Bucket is an object store. Implementations are safe for concurrent use.
type Bucket interface {
	// NewRangeReader reads length bytes of the object at key from offset
	// (length < 0 reads to the end). A key without an object gives an
	// error that satisfies errors.Is(err, ErrNotExist).
	NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// NewWriter starts writing the object at key, replacing any object
	// there once Close returns nil. If ctx is done before Close, Close
	// discards what was written and returns ctx's error, leaving the key
	// as it was.
	NewWriter(ctx context.Context, key string) (io.WriteCloser, error)
	// Stat describes the object at key (ErrNotExist if there is none).
	Stat(ctx context.Context, key string) (Object, error)
	// List yields every object whose key starts with prefix, in ascending
	// key order; a non-nil error ends the sequence.
	List(ctx context.Context, prefix string) iter.Seq2[Object, error]
	// Delete removes the object at key (ErrNotExist if there is none).
	Delete(ctx context.Context, key string) error
	// Close releases the bucket. Buckets opened by URL are closed by
	// whoever opened them.
	Close() error
}

// ReadAll reads the whole object at key.
func ReadAll(ctx context.Context, b Bucket, key string) ([]byte, error) {
	r, err := b.NewRangeReader(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// WriteAll writes p as the object at key, atomically.
func WriteAll(ctx context.Context, b Bucket, key string, p []byte) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.NewWriter(wctx, key)
	if err != nil {
		return err
	}
	if _, err := w.Write(p); err != nil {
		cancel() // discard what was written
		w.Close()
		return err
	}
	return w.Close()
}

// Exists reports whether an object is stored at key.
func Exists(ctx context.Context, b Bucket, key string) (bool, error) {
	_, err := b.Stat(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// driverImports says, for the schemes of storage/gocloud, what to import.
var driverImports = map[string]string{
	"gs":     `add import _ "github.com/goray-dev/goray/storage/gocloud" and _ "gocloud.dev/blob/gcsblob" (Google Cloud Storage)`,
	"s3":     `add import _ "github.com/goray-dev/goray/storage/gocloud" and _ "gocloud.dev/blob/s3blob" (Amazon S3)`,
	"azblob": `add import _ "github.com/goray-dev/goray/storage/gocloud" and _ "gocloud.dev/blob/azureblob" (Azure Blob Storage)`,
}

// Opener opens the bucket a URL names; see [Register].
type Opener func(ctx context.Context, u *url.URL) (Bucket, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes [Open] open URLs of scheme (without "://") with open. It
// panics if scheme is empty, built in (file, mem) or already registered, or
// open is nil, like database/sql.Register: registration happens in init
// functions, and a clash is a programming error.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	switch {
	case scheme == "" || strings.Contains(scheme, ":"):
		panic(fmt.Sprintf("storage: Register: invalid scheme %q (a URL scheme such as \"gs\", without \"://\")", scheme))
	case scheme == "file" || scheme == "mem":
		panic(fmt.Sprintf("storage: Register: scheme %q is built in", scheme))
	case open == nil:
		panic(fmt.Sprintf("storage: Register: nil Opener for scheme %q", scheme))
	case openers[scheme] != nil:
		panic(fmt.Sprintf("storage: Register: scheme %q registered twice", scheme))
	}
	openers[scheme] = open
}

// Schemes lists the URL schemes [Open] accepts, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	out := []string{"file", "mem"}
	for s := range openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens the bucket that rawURL names:
//
//   - file:///abs/dir, or the plain absolute path /abs/dir: the directory
//     on local disk (see [Dir]); created on the first write if it does not
//     exist;
//   - mem://: a new, empty in-memory bucket (see [NewMem]);
//   - any scheme given to [Register], such as gs://, s3:// and azblob://
//     after importing github.com/goray-dev/goray/storage/gocloud.
func Open(ctx context.Context, rawURL string) (Bucket, error) {
	if strings.HasPrefix(rawURL, "/") {
		// A plain absolute path, as Ray users pass: file:// of it.
		return Dir(filepath.Clean(rawURL))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errf(backend.InvalidArgument, "storage: open %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, errf(backend.InvalidArgument, "storage: open %q: a file URL names an absolute path, file:///dir (host %q is not allowed)", rawURL, u.Host)
		}
		if u.Path == "" {
			return nil, errf(backend.InvalidArgument, "storage: open %q: a file URL needs an absolute path, file:///dir", rawURL)
		}
		return Dir(u.Path)
	case "mem":
		return NewMem(), nil
	case "":
		return nil, errf(backend.InvalidArgument, "storage: open %q: neither a URL nor an absolute path; use /abs/dir, file:///abs/dir, mem:// or one of the schemes %v", rawURL, Schemes())
	}
	openersMu.RLock()
	open := openers[u.Scheme]
	openersMu.RUnlock()
	if open == nil {
		if hint, ok := driverImports[u.Scheme]; ok {
			// A valid URL whose driver this program does not link in.
			return nil, errf(backend.FailedPrecondition, "storage: open %q: no bucket driver for scheme %q in this program (registered: %v): %s", rawURL, u.Scheme, Schemes(), hint)
		}
		return nil, errf(backend.InvalidArgument, "storage: open %q: no bucket driver for scheme %q (registered: %v); for gs://, s3:// and azblob:// import github.com/goray-dev/goray/storage/gocloud and the gocloud.dev/blob driver, e.g. gocloud.dev/blob/gcsblob", rawURL, u.Scheme, Schemes())
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, wrapf("storage: open %q: %w", rawURL, err)
	}
	return b, nil
}

// ValidKey reports whether key is a valid object key: non-empty,
// slash-separated, without a leading or trailing slash, empty, "." or ".."
// segments, or NUL bytes. The built-in buckets reject other keys.
func ValidKey(key string) error {
	if key == "" {
		return errf(backend.InvalidArgument, "storage: empty key")
	}
	if strings.ContainsRune(key, 0) {
		return errf(backend.InvalidArgument, "storage: key %q contains a NUL byte", key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errf(backend.InvalidArgument, "storage: invalid key %q: keys are slash-separated names without empty, \".\" or \"..\" segments or a leading or trailing slash", key)
		}
	}
	return nil
}
