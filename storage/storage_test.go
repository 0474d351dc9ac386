package storage_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
	"github.com/goray-dev/goray/storage/storagetest"
)

func TestDir(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Bucket {
		b, err := storage.Dir(filepath.Join(t.TempDir(), "not", "yet"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestMem(t *testing.T) {
	storagetest.Run(t, func(*testing.T) storage.Bucket { return storage.NewMem() })
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tt := range []struct {
		url     string
		wantErr string // empty: opens
	}{
		{url: "file://" + filepath.ToSlash(dir)},
		{url: "mem://"},
		{url: "gs://bucket", wantErr: `no bucket driver for scheme "gs"`},
		{url: dir}, // a plain absolute path, as Ray users pass
		{url: "relative/dir", wantErr: "neither a URL nor an absolute path; use /abs/dir, file:///abs/dir, mem://"},
		{url: "file://host/dir", wantErr: `host "host" is not allowed`},
		{url: "file://", wantErr: "needs an absolute path"},
		{url: "%zz", wantErr: "invalid URL escape"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			is := is.New(t)
			b, err := storage.Open(ctx, tt.url)
			if tt.wantErr == "" {
				is.NoErr(err)
				is.NoErr(b.Close())
				return
			}
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), tt.wantErr)) // the error says what was wrong
		})
	}
}

func TestOpenFileSeesFiles(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	dir := t.TempDir()
	is.NoErr(os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	is.NoErr(os.WriteFile(filepath.Join(dir, "sub", "f.txt"), []byte("on disk"), 0o644))
	b, err := storage.Open(ctx, "file://"+filepath.ToSlash(dir))
	is.NoErr(err)
	defer b.Close()
	got, err := storage.ReadAll(ctx, b, "sub/f.txt")
	is.NoErr(err)
	is.Equal(string(got), "on disk")
	plain, err := storage.Open(ctx, dir) // the same directory as a plain path
	is.NoErr(err)
	got, err = storage.ReadAll(ctx, plain, "sub/f.txt")
	is.NoErr(err)
	is.Equal(string(got), "on disk")
	is.NoErr(plain.Close())
	// Deleting the last object removes the directories it leaves empty.
	is.NoErr(b.Delete(ctx, "sub/f.txt"))
	_, err = os.Stat(filepath.Join(dir, "sub"))
	is.True(errors.Is(err, os.ErrNotExist))
}

func TestDirRejectsAFile(t *testing.T) {
	is := is.New(t)
	f := filepath.Join(t.TempDir(), "f")
	is.NoErr(os.WriteFile(f, nil, 0o644))
	_, err := storage.Dir(f)
	is.True(err != nil && strings.Contains(err.Error(), "is a file, not a directory"))
}

func TestInvalidKeys(t *testing.T) {
	ctx := context.Background()
	dir, err := storage.Dir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []storage.Bucket{dir, storage.NewMem()} {
		for _, key := range []string{"", "/abs", "trailing/", "a//b", "../escape", "a/./b", "nul\x00"} {
			t.Run(key, func(t *testing.T) {
				is := is.New(t)
				err := storage.WriteAll(ctx, b, key, []byte("x"))
				is.True(err != nil)
				is.True(strings.Contains(err.Error(), "key")) // the error names the key
			})
		}
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	dir, err := storage.Dir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []storage.Bucket{dir, storage.NewMem()} {
		is := is.New(t)
		is.NoErr(b.Close())
		is.True(errors.Is(storage.WriteAll(ctx, b, "k", nil), storage.ErrClosed))
		_, err := b.Stat(ctx, "k")
		is.True(errors.Is(err, storage.ErrClosed))
		for _, err := range b.List(ctx, "") {
			is.True(errors.Is(err, storage.ErrClosed))
		}
		is.True(errors.Is(b.Close(), storage.ErrClosed))
	}
}

// registerTestScheme registers "test-scheme" once per process (Register
// refuses a second time), so that TestRegister passes with -count=N.
var registerTestScheme = sync.OnceFunc(func() {
	storage.Register("test-scheme", func(ctx context.Context, u *url.URL) (storage.Bucket, error) {
		if u.Host == "bad" {
			return nil, errors.New("no such bucket")
		}
		return storage.NewMem(), nil
	})
})

func TestRegister(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	registerTestScheme()
	b, err := storage.Open(ctx, "test-scheme://ok")
	is.NoErr(err)
	is.NoErr(b.Close())
	_, err = storage.Open(ctx, "test-scheme://bad")
	is.True(err != nil && strings.Contains(err.Error(), `open "test-scheme://bad": no such bucket`))
	is.True(slices.Contains(storage.Schemes(), "test-scheme"))

	for _, tt := range []struct {
		name   string
		scheme string
		open   storage.Opener
	}{
		{"twice", "test-scheme", func(context.Context, *url.URL) (storage.Bucket, error) { return nil, nil }},
		{"built in", "file", func(context.Context, *url.URL) (storage.Bucket, error) { return nil, nil }},
		{"empty", "", func(context.Context, *url.URL) (storage.Bucket, error) { return nil, nil }},
		{"nil opener", "other", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			defer func() { is.True(recover() != nil) }() // Register panics
			storage.Register(tt.scheme, tt.open)
		})
	}
}
