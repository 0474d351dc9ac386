package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/goray-dev/goray/storage"
)

// Files names the files a source reads, or the file a sink writes: in a
// bucket ([InBucket]: file:// and mem:// built in, gs://, s3:// and
// azblob:// through package storage/gocloud), on the local disk
// ([LocalFiles]), or any stream ([FromStream]).
//
// For reading, the pattern is a file's key, a folder (every file under it,
// recursively) or a glob in path.Match syntax ("logs/2026-*/*.jsonl");
// files are read in key order. For writing it is the one file's key.
// The zero value names nothing.
type Files struct {
	bucket  storage.Bucket
	local   bool
	pattern string
	stream  func(ctx context.Context) (io.ReadCloser, error)
}

// InBucket names files in a bucket that the caller opened (and closes,
// after the runs that use it) with storage.Open, storage.Dir or
// storage.NewMem, or a gocloud.dev/blob bucket wrapped by package
// github.com/goray-dev/goray/storage/gocloud.
func InBucket(b storage.Bucket, pattern string) Files {
	return Files{bucket: b, pattern: strings.TrimPrefix(pattern, "/")}
}

// LocalFiles names files on the local disk by path: a file, a directory or
// a glob in filepath.Match syntax.
func LocalFiles(pattern string) Files { return Files{local: true, pattern: pattern} }

// FromStream names one file read from a stream that open returns (stdin,
// an HTTP body, ...), named name in positions. Parquet, which needs random
// access, reads the whole stream into memory first.
func FromStream(name string, open func(ctx context.Context) (io.ReadCloser, error)) Files {
	return Files{pattern: name, stream: open}
}

func (f Files) String() string {
	switch {
	case f.local:
		return f.pattern
	case f.stream != nil:
		return f.pattern
	default:
		return "bucket:" + f.pattern
	}
}

// file is one file to read.
type file struct {
	name string // for positions and errors
	open func(ctx context.Context) (io.ReadCloser, error)
	// readerAt gives random access (for Parquet).
	readerAt func(ctx context.Context) (readerAtSize, func() error, error)
}

type readerAtSize interface {
	io.ReaderAt
	Size() int64
}

func hasMeta(p string) bool { return strings.ContainsAny(p, "*?[\\") }

// list resolves the files to read; close releases a bucket it opened.
func (f Files) list(ctx context.Context) (files []file, close func(), err error) {
	switch {
	case f.stream != nil:
		fl := file{name: f.pattern, open: f.stream}
		fl.readerAt = func(ctx context.Context) (readerAtSize, func() error, error) {
			rc, err := f.stream(ctx)
			if err != nil {
				return nil, nil, err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			if err != nil {
				return nil, nil, err
			}
			return bytes.NewReader(b), func() error { return nil }, nil
		}
		return []file{fl}, func() {}, nil
	case f.local:
		root, pattern, err := splitLocal(f.pattern)
		if err != nil {
			return nil, nil, err
		}
		b, err := storage.Dir(root)
		if err != nil {
			return nil, nil, fmt.Errorf("data: open %s: %w", root, err)
		}
		files, err := listBucket(ctx, b, pattern, func(key string) string { return filepath.Join(root, filepath.FromSlash(key)) })
		if err != nil {
			b.Close()
			return nil, nil, err
		}
		return files, func() { b.Close() }, nil
	case f.bucket != nil:
		files, err := listBucket(ctx, f.bucket, f.pattern, func(key string) string { return key })
		return files, func() {}, err
	default:
		return nil, nil, badArg("Files: no files named (use InBucket, LocalFiles or FromStream)")
	}
}

// splitLocal splits a local pattern into a directory to open as a bucket
// and a key pattern in it.
func splitLocal(p string) (root, pattern string, err error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", "", fmt.Errorf("data: local path %q: %w", p, err)
	}
	if !hasMeta(abs) {
		st, err := os.Stat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			return "", "", notFound("data: %s: no such file or folder (name a file, a folder or a glob)", abs)
		}
		if err != nil {
			return "", "", fmt.Errorf("data: %w", err)
		}
		if st.IsDir() {
			return abs, "", nil
		}
		return filepath.Dir(abs), filepath.Base(abs), nil
	}
	dir := abs
	for hasMeta(dir) {
		dir = filepath.Dir(dir)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return "", "", err
	}
	return dir, filepath.ToSlash(rel), nil
}

// listBucket finds the keys that pattern names: the key itself, every key
// under it as a folder, or the keys matching it as a glob.
func listBucket(ctx context.Context, b storage.Bucket, pattern string, display func(string) string) ([]file, error) {
	var keys []string
	collect := func(prefix string, keep func(string) bool) error {
		for obj, err := range b.List(ctx, prefix) {
			if err != nil {
				return fmt.Errorf("data: list %s: %w", display(prefix), err)
			}
			if keep(obj.Key) {
				keys = append(keys, obj.Key)
			}
		}
		return nil
	}
	if hasMeta(pattern) {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, badArg("Files: bad glob %q: %w (the syntax is path.Match's: * ? [a-z] \\)", pattern, err)
		}
		prefix := pattern[:strings.IndexAny(pattern, "*?[\\")]
		prefix = prefix[:strings.LastIndex(prefix, "/")+1]
		if err := collect(prefix, func(k string) bool { ok, _ := path.Match(pattern, k); return ok }); err != nil {
			return nil, err
		}
	} else {
		ok := false
		if pattern != "" {
			var err error
			if ok, err = storage.Exists(ctx, b, pattern); err != nil {
				return nil, fmt.Errorf("data: %s: %w", display(pattern), err)
			}
		}
		if ok {
			keys = []string{pattern}
		} else {
			prefix := pattern
			if prefix != "" && !strings.HasSuffix(prefix, "/") {
				prefix += "/"
			}
			if err := collect(prefix, func(string) bool { return true }); err != nil {
				return nil, err
			}
		}
	}
	if len(keys) == 0 {
		return nil, notFound("data: no files match %q (a file's key, a folder or a glob)", display(pattern))
	}
	files := make([]file, len(keys))
	for i, k := range keys {
		files[i] = file{
			name: display(k),
			open: func(ctx context.Context) (io.ReadCloser, error) { return b.NewRangeReader(ctx, k, 0, -1) },
			readerAt: func(ctx context.Context) (readerAtSize, func() error, error) {
				obj, err := b.Stat(ctx, k)
				if err != nil {
					return nil, nil, err
				}
				return &blobReaderAt{ctx: ctx, b: b, key: k, size: obj.Size}, func() error { return nil }, nil
			},
		}
	}
	return files, nil
}

// blobReaderAt gives random access to an object through range reads.
type blobReaderAt struct {
	ctx  context.Context
	b    storage.Bucket
	key  string
	size int64
}

func (r *blobReaderAt) Size() int64 { return r.size }

func (r *blobReaderAt) ReadAt(p []byte, off int64) (int, error) {
	rr, err := r.b.NewRangeReader(r.ctx, r.key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer rr.Close()
	n, err := io.ReadFull(rr, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// create opens the one file f names for writing, atomically: nothing
// appears under the name until commit succeeds, and abort leaves nothing.
func (f Files) create(ctx context.Context) (w io.Writer, commit func() error, abort func(), err error) {
	var b storage.Bucket
	key := f.pattern
	closeBucket := func() {}
	switch {
	case f.stream != nil:
		return nil, nil, nil, badArg("Files: cannot write to a stream source; use InBucket or LocalFiles")
	case f.local:
		abs, err := filepath.Abs(f.pattern)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("data: local path %q: %w", f.pattern, err)
		}
		// The temporary file goes next to the target, so the final rename
		// is atomic.
		b, err = storage.Dir(filepath.Dir(abs))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("data: open %s: %w", filepath.Dir(abs), err)
		}
		key = filepath.Base(abs)
		closeBucket = func() { b.Close() }
	case f.bucket != nil:
		b = f.bucket
	default:
		return nil, nil, nil, badArg("Files: no file named (use InBucket or LocalFiles)")
	}
	if key == "" || hasMeta(key) {
		closeBucket()
		return nil, nil, nil, badArg("Files: cannot write to %q: name one file, without glob characters", f.pattern)
	}
	wctx, cancel := context.WithCancel(ctx)
	bw, err := b.NewWriter(wctx, key)
	if err != nil {
		cancel()
		closeBucket()
		return nil, nil, nil, fmt.Errorf("data: create %s: %w", f, err)
	}
	commit = func() error {
		defer closeBucket()
		defer cancel()
		if err := bw.Close(); err != nil {
			return fmt.Errorf("data: write %s: %w", f, err)
		}
		return nil
	}
	abort = func() {
		cancel() // a writer whose context ends before Close discards what it wrote
		bw.Close()
		closeBucket()
	}
	return bw, commit, abort, nil
}
