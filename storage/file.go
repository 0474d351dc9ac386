package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
)

// tmpMark marks the temporary files of writes in progress; List skips them.
const tmpMark = ".goray-tmp-"

// Dir returns a bucket of the files under the local directory dir: the
// object at key "a/b" is the file dir/a/b. The directory is created on the
// first write if it does not exist. Writes go to a temporary file next to
// the target, synced and renamed into place on Close, so an object appears
// whole or not at all, even across a crash.
func Dir(dir string) (Bucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: directory %q: %w", dir, err)
	}
	if st, err := os.Stat(abs); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("storage: %s is a file, not a directory", abs)
	}
	return &fileBucket{root: abs}, nil
}

type fileBucket struct {
	root   string
	closed atomic.Bool
}

func (b *fileBucket) String() string { return "file://" + filepath.ToSlash(b.root) }

// path maps a key to its file, checking the key and the bucket.
func (b *fileBucket) path(ctx context.Context, key string) (string, error) {
	if b.closed.Load() {
		return "", ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := ValidKey(key); err != nil {
		return "", err
	}
	if strings.Contains(key, tmpMark) {
		return "", fmt.Errorf("storage: invalid key %q: %q marks temporary files", key, tmpMark)
	}
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

func (b *fileBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("storage: read %q: negative offset %d", key, offset)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("storage: read %q in %s: %w", key, b, err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("storage: read %q in %s: %w", key, b, ErrNotExist)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("storage: read %q in %s: %w", key, b, err)
		}
	}
	if length < 0 {
		return f, nil
	}
	return limitedFile{Reader: io.LimitReader(f, length), f: f}, nil
}

type limitedFile struct {
	io.Reader
	f *os.File
}

func (l limitedFile) Close() error { return l.f.Close() }

func (b *fileBucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: write %q in %s: %w", key, b, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(p)+tmpMark+"*")
	if err != nil {
		return nil, fmt.Errorf("storage: write %q in %s: %w", key, b, err)
	}
	return &fileWriter{ctx: ctx, f: f, target: p, key: key, b: b}, nil
}

type fileWriter struct {
	ctx    context.Context
	f      *os.File
	target string
	key    string
	b      *fileBucket
	done   bool
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, fmt.Errorf("storage: write %q: writer is closed", w.key)
	}
	return w.f.Write(p)
}

func (w *fileWriter) Close() error {
	if w.done {
		return fmt.Errorf("storage: write %q: writer is closed", w.key)
	}
	w.done = true
	err := w.ctx.Err()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.f.Name(), w.target)
	}
	if err != nil {
		os.Remove(w.f.Name())
		if errors.Is(err, w.ctx.Err()) {
			return err
		}
		return fmt.Errorf("storage: write %q in %s: %w", w.key, w.b, err)
	}
	return nil
}

func (b *fileBucket) Stat(ctx context.Context, key string) (Object, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return Object{}, err
	}
	st, err := os.Stat(p)
	if err == nil && st.IsDir() {
		err = ErrNotExist
	}
	if err != nil {
		return Object{}, fmt.Errorf("storage: stat %q in %s: %w", key, b, err)
	}
	return Object{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

func (b *fileBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		if b.closed.Load() {
			yield(Object{}, ErrClosed)
			return
		}
		// Walk only the deepest directory the prefix names.
		start := b.root
		if i := strings.LastIndex(prefix, "/"); i >= 0 {
			start = filepath.Join(b.root, filepath.FromSlash(prefix[:i]))
		}
		var objs []Object
		err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if d.IsDir() || strings.Contains(d.Name(), tmpMark) {
				return nil
			}
			rel, err := filepath.Rel(b.root, p)
			if err != nil {
				return err
			}
			key := filepath.ToSlash(rel)
			if !strings.HasPrefix(key, prefix) {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) { // deleted meanwhile
					return nil
				}
				return err
			}
			objs = append(objs, Object{Key: key, Size: info.Size(), ModTime: info.ModTime()})
			return nil
		})
		if err != nil {
			yield(Object{}, fmt.Errorf("storage: list %q in %s: %w", prefix, b, err))
			return
		}
		slices.SortFunc(objs, func(x, y Object) int { return cmp.Compare(x.Key, y.Key) })
		for _, o := range objs {
			if !yield(o, nil) {
				return
			}
		}
	}
}

func (b *fileBucket) Delete(ctx context.Context, key string) error {
	p, err := b.path(ctx, key)
	if err != nil {
		return err
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return fmt.Errorf("storage: delete %q in %s: %w", key, b, ErrNotExist)
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("storage: delete %q in %s: %w", key, b, err)
	}
	// Remove directories the delete left empty, up to the root.
	for dir := filepath.Dir(p); dir != b.root && strings.HasPrefix(dir, b.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

func (b *fileBucket) Close() error {
	if b.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}
