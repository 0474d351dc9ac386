package storage

import (
	"bytes"
	"context"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
)

// NewMem returns an empty bucket that keeps its objects in memory, for
// tests and for runs whose checkpoints need not outlive the process.
func NewMem() Bucket { return &memBucket{objs: map[string]memObject{}} }

type memObject struct {
	data []byte
	mod  time.Time
}

type memBucket struct {
	mu     sync.RWMutex
	objs   map[string]memObject
	closed bool
}

func (b *memBucket) check(ctx context.Context, key string) error {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ValidKey(key)
}

func (b *memBucket) get(key string) (memObject, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, ok := b.objs[key]
	return o, ok
}

func (b *memBucket) NewRangeReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := b.check(ctx, key); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, errf(backend.InvalidArgument, "storage: read %q: negative offset %d", key, offset)
	}
	o, ok := b.get(key)
	if !ok {
		return nil, wrapf("storage: read %q in mem://: %w", key, ErrNotExist)
	}
	data := o.data[min(offset, int64(len(o.data))):]
	if length >= 0 && length < int64(len(data)) {
		data = data[:length]
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (b *memBucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	if err := b.check(ctx, key); err != nil {
		return nil, err
	}
	return &memWriter{ctx: ctx, b: b, key: key}, nil
}

type memWriter struct {
	ctx  context.Context
	b    *memBucket
	key  string
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errf(backend.FailedPrecondition, "storage: write %q: writer is closed", w.key)
	}
	return w.buf.Write(p)
}

func (w *memWriter) Close() error {
	if w.done {
		return errf(backend.FailedPrecondition, "storage: write %q: writer is closed", w.key)
	}
	w.done = true
	if err := w.ctx.Err(); err != nil {
		return err
	}
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	if w.b.closed {
		return ErrClosed
	}
	w.b.objs[w.key] = memObject{data: bytes.Clone(w.buf.Bytes()), mod: time.Now()}
	return nil
}

func (b *memBucket) Stat(ctx context.Context, key string) (Object, error) {
	if err := b.check(ctx, key); err != nil {
		return Object{}, err
	}
	o, ok := b.get(key)
	if !ok {
		return Object{}, wrapf("storage: stat %q in mem://: %w", key, ErrNotExist)
	}
	return Object{Key: key, Size: int64(len(o.data)), ModTime: o.mod}, nil
}

func (b *memBucket) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		b.mu.RLock()
		if b.closed {
			b.mu.RUnlock()
			yield(Object{}, ErrClosed)
			return
		}
		var objs []Object
		for k, o := range b.objs {
			if strings.HasPrefix(k, prefix) {
				objs = append(objs, Object{Key: k, Size: int64(len(o.data)), ModTime: o.mod})
			}
		}
		b.mu.RUnlock()
		slices.SortFunc(objs, func(x, y Object) int { return strings.Compare(x.Key, y.Key) })
		for _, o := range objs {
			if err := ctx.Err(); err != nil {
				yield(Object{}, err)
				return
			}
			if !yield(o, nil) {
				return
			}
		}
	}
}

func (b *memBucket) Delete(ctx context.Context, key string) error {
	if err := b.check(ctx, key); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objs[key]; !ok {
		return wrapf("storage: delete %q in mem://: %w", key, ErrNotExist)
	}
	delete(b.objs, key)
	return nil
}

func (b *memBucket) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.closed = true
	b.objs = nil
	return nil
}
