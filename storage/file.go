package storage

import (
	"cmp"
	"context"
	"errors"
	"io"
	"io/fs"
	"iter"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goray-dev/goray/backend"
)

// tmpMark marks the temporary files of writes in progress; List skips them.
const tmpMark = ".goray-tmp-"

// Dir returns a bucket of the files under the local directory dir: the
// object at key "a/b" is the file dir/a/b. The directory is created on the
// first write if it does not exist. Writes go to a temporary file next to
// the target, synced and renamed into place on Close, so an object appears
// whole or not at all, even across a crash.
//
// The bucket stays inside dir: every operation goes through an os.Root
// opened on it, so no key, List prefix ("../" is refused as an invalid
// prefix) or symlink inside dir reads, writes, deletes or lists a file
// outside it; symlinks and other special files are not listed as objects.
func Dir(dir string) (Bucket, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, wrapf("storage: directory %q: %w", dir, err)
	}
	if st, err := os.Stat(abs); err == nil && !st.IsDir() {
		return nil, errf(backend.InvalidArgument, "storage: %s is a file, not a directory", abs)
	}
	return &fileBucket{root: abs}, nil
}

// fileBucket does every file operation through an os.Root opened on its
// directory, so that no key, prefix or symlink inside the directory
// reaches a file outside it.
type fileBucket struct {
	root   string
	closed atomic.Bool

	mu  sync.Mutex
	dir *os.Root // opened on first use; nil while the directory does not exist

	writing sync.Map // temporary files of this process's open writers
}

func (b *fileBucket) String() string { return "file://" + filepath.ToSlash(b.root) }

// open returns the bucket's os.Root, creating the directory first if
// create is set; without it, a missing directory is ErrNotExist.
func (b *fileBucket) open(create bool) (*os.Root, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if b.dir != nil {
		return b.dir, nil
	}
	if create {
		if err := os.MkdirAll(b.root, 0o755); err != nil {
			return nil, err
		}
	}
	r, err := os.OpenRoot(b.root)
	if err != nil {
		return nil, err
	}
	b.dir = r
	return r, nil
}

// path checks a key and the bucket and returns the key's name inside the
// bucket's directory.
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
		return "", errf(backend.InvalidArgument, "storage: invalid key %q: %q marks temporary files", key, tmpMark)
	}
	return filepath.FromSlash(key), nil
}

func (b *fileBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, errf(backend.InvalidArgument, "storage: read %q: negative offset %d", key, offset)
	}
	dir, err := b.open(false)
	if err != nil {
		return nil, wrapf("storage: read %q in %s: %w", key, b, err)
	}
	f, err := dir.Open(p)
	if err != nil {
		return nil, wrapf("storage: read %q in %s: %w", key, b, err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, wrapf("storage: read %q in %s: %w", key, b, ErrNotExist)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, wrapf("storage: read %q in %s: %w", key, b, err)
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
	root, err := b.open(true)
	if err != nil {
		return nil, wrapf("storage: write %q in %s: %w", key, b, err)
	}
	dir := filepath.Dir(p)
	var f *os.File
	var tmp string
	for range 100 {
		// Another goroutine's Delete or RemoveDebris removes directories
		// left empty, such as the one made here a moment ago, before the
		// temporary file is in it: make it again whenever the open finds
		// no directory.
		// MkdirAll itself meets the same removal when a parent it has
		// just made is removed before its child is: start again.
		if err = root.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, wrapf("storage: write %q in %s: %w", key, b, err)
		}
		// The writer's PID in the name tells RemoveDebris whether the
		// write can still finish; the name is registered as this
		// process's open write before the file exists, so that a
		// concurrent RemoveDebris never takes it for a dead writer's.
		tmp = filepath.Join(dir, "."+filepath.Base(p)+tmpMark+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(rand.Uint64(), 36))
		b.writing.Store(tmp, true)
		f, err = root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		b.writing.Delete(tmp)
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, wrapf("storage: write %q in %s: %w", key, b, err)
	}
	return &fileWriter{ctx: ctx, f: f, root: root, tmp: tmp, target: p, key: key, b: b}, nil
}

// RemoveDebris removes, under prefix, the temporary files of writes that
// can no longer finish: those of processes that are no longer running
// (killed mid-write) and this process's own that no writer holds, plus
// the directories they leave empty. It reports how many files it
// removed. Temporary files of a running process are left alone (on
// systems where that cannot be told, every other process counts as
// running).
func (b *fileBucket) RemoveDebris(ctx context.Context, prefix string) (int, error) {
	start := "."
	if prefix != "" {
		if err := ValidKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return 0, wrapf("storage: remove debris under %q in %s: invalid prefix: %w", prefix, b, err)
		}
		start = strings.TrimSuffix(prefix, "/")
	}
	root, err := b.open(false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, wrapf("storage: remove debris under %q in %s: %w", prefix, b, err)
	}
	var debris []string
	err = fs.WalkDir(root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		_, rest, ok := strings.Cut(d.Name(), tmpMark)
		if !ok || !d.Type().IsRegular() {
			return nil
		}
		if pidStr, _, ok := strings.Cut(rest, "-"); ok {
			pid, perr := strconv.Atoi(pidStr)
			switch {
			case perr != nil:
				return nil // not a name this package wrote
			case pid == os.Getpid():
				if _, open := b.writing.Load(filepath.FromSlash(p)); open {
					return nil
				}
			case processRunning(pid):
				return nil
			}
		} else if info, err := d.Info(); err != nil || time.Since(info.ModTime()) < time.Hour {
			return nil // written before names carried the PID: only when old
		}
		debris = append(debris, p)
		return nil
	})
	if err != nil {
		return 0, wrapf("storage: remove debris under %q in %s: %w", prefix, b, err)
	}
	n := 0
	// Only the directories that held debris are removed when it leaves
	// them empty, and their parents up to the prefix: an empty directory
	// someone else made (a program's staging directory, about to be
	// written) is not debris.
	emptied := map[string]bool{}
	for _, p := range debris {
		if root.Remove(filepath.FromSlash(p)) != nil {
			continue
		}
		n++
		for d := path.Dir(p); d != "." && d != path.Dir(start) && !emptied[d]; d = path.Dir(d) {
			emptied[d] = true
		}
	}
	// Deepest first, so that a parent is tried after its children.
	dirs := slices.SortedFunc(maps.Keys(emptied), func(a, b string) int {
		return cmp.Or(-cmp.Compare(strings.Count(a, "/"), strings.Count(b, "/")), strings.Compare(a, b))
	})
	for _, d := range dirs {
		root.Remove(filepath.FromSlash(d)) //nolint:errcheck // fails while the directory holds anything
	}
	return n, nil
}

type fileWriter struct {
	ctx         context.Context
	f           *os.File
	root        *os.Root
	tmp, target string // names inside root
	key         string
	b           *fileBucket
	done        bool
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errf(backend.FailedPrecondition, "storage: write %q: writer is closed", w.key)
	}
	n, err := w.f.Write(p)
	if err != nil {
		return n, wrapf("storage: write %q in %s: %w", w.key, w.b, err)
	}
	return n, nil
}

func (w *fileWriter) Close() error {
	if w.done {
		return errf(backend.FailedPrecondition, "storage: write %q: writer is closed", w.key)
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
		err = w.root.Chmod(w.tmp, 0o644)
	}
	if err == nil {
		err = w.root.Rename(w.tmp, w.target)
	}
	w.b.writing.Delete(w.tmp)
	if err != nil {
		w.root.Remove(w.tmp)
		if errors.Is(err, w.ctx.Err()) {
			return err
		}
		return wrapf("storage: write %q in %s: %w", w.key, w.b, err)
	}
	return nil
}

func (b *fileBucket) Stat(ctx context.Context, key string) (Object, error) {
	p, err := b.path(ctx, key)
	if err != nil {
		return Object{}, err
	}
	dir, err := b.open(false)
	var st fs.FileInfo
	if err == nil {
		st, err = dir.Stat(p)
	}
	if err == nil && st.IsDir() {
		err = ErrNotExist
	}
	if err != nil {
		return Object{}, wrapf("storage: stat %q in %s: %w", key, b, err)
	}
	return Object{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

func (b *fileBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		if b.closed.Load() {
			yield(Object{}, ErrClosed)
			return
		}
		// Walk only the deepest directory the prefix names; its
		// segments must be valid key segments (no "..": a prefix never
		// leaves the bucket).
		start := "."
		if i := strings.LastIndex(prefix, "/"); i >= 0 {
			if err := ValidKey(prefix[:i]); err != nil {
				yield(Object{}, wrapf("storage: list %q in %s: invalid prefix: %w", prefix, b, err))
				return
			}
			start = prefix[:i]
		}
		if strings.ContainsRune(prefix, 0) {
			yield(Object{}, errf(backend.InvalidArgument, "storage: list %q in %s: the prefix contains a NUL byte", prefix, b))
			return
		}
		dir, err := b.open(false)
		if errors.Is(err, fs.ErrNotExist) {
			return // no directory yet: no objects
		}
		if err != nil {
			yield(Object{}, wrapf("storage: list %q in %s: %w", prefix, b, err))
			return
		}
		var objs []Object
		err = fs.WalkDir(dir.FS(), start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			// Directories are walked; symlinks and other special files
			// are not objects (a symlink could lead out of the bucket).
			if d.IsDir() || !d.Type().IsRegular() || strings.Contains(d.Name(), tmpMark) {
				return nil
			}
			key := p // fs.FS paths are slash-separated, relative to the root
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
			yield(Object{}, wrapf("storage: list %q in %s: %w", prefix, b, err))
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
	root, err := b.open(false)
	if err != nil {
		return wrapf("storage: delete %q in %s: %w", key, b, err)
	}
	if st, err := root.Lstat(p); err == nil && !st.Mode().IsRegular() {
		return wrapf("storage: delete %q in %s: %w", key, b, ErrNotExist)
	}
	if err := root.Remove(p); err != nil {
		return wrapf("storage: delete %q in %s: %w", key, b, err)
	}
	// Remove directories the delete left empty, up to the root.
	for dir := filepath.Dir(p); dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if root.Remove(dir) != nil {
			break
		}
	}
	return nil
}

func (b *fileBucket) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return ErrClosed
	}
	if b.dir != nil {
		return b.dir.Close()
	}
	return nil
}
