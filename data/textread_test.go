package data_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/storage"
)

// ReadText reads lines from local files and buckets, by file, folder and
// glob, in key order: line breaks (LF and CRLF) removed, empty lines
// skipped but counted in positions.
func TestReadText(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	is := is.New(t)
	is.NoErr(os.MkdirAll(filepath.Join(dir, "logs"), 0o755))
	is.NoErr(os.WriteFile(filepath.Join(dir, "logs", "a.txt"), []byte("one\r\ntwo\n\nthree"), 0o644))
	is.NoErr(os.WriteFile(filepath.Join(dir, "logs", "b.txt"), []byte("four\n  five  \n"), 0o644))
	is.NoErr(os.WriteFile(filepath.Join(dir, "logs", "c.log"), []byte("other\n"), 0o644))
	mem := storage.NewMem()
	defer mem.Close()
	is.NoErr(storage.WriteAll(ctx, mem, "logs/a.txt", []byte("one\r\ntwo\n\nthree")))
	is.NoErr(storage.WriteAll(ctx, mem, "logs/b.txt", []byte("four\n  five  \n")))
	want := []string{"one", "two", "three", "four", "  five  "}
	for _, files := range []data.Files{
		data.LocalFiles(filepath.Join(dir, "logs", "*.txt")),
		data.InBucket(mem, "logs"),
		data.InBucket(mem, "logs/*.txt"),
	} {
		got, err := data.Take(ctx, data.ReadText(files), 100)
		is.NoErr(err)
		is.Equal(got, want)
	}
	got, err := data.Take(ctx, data.ReadText(data.LocalFiles(filepath.Join(dir, "logs"))), 100)
	is.NoErr(err)
	is.Equal(got, append(want, "other")) // the folder: a.txt, b.txt, c.log
}

// A line over MaxLineBytes is a bad row naming the file and line, coded
// ResourceExhausted, and skippable: the lines around it are read, and
// the statistics count it (rows read = out + bad).
func TestReadTextLongLine(t *testing.T) {
	ctx := context.Background()
	is := is.New(t)
	p := filepath.Join(t.TempDir(), "long.txt")
	is.NoErr(os.WriteFile(p, []byte("short\n"+strings.Repeat("x", 101)+"\r\n"+strings.Repeat("y", 100)+"\r\nend"), 0o644))
	_, err := data.Take(ctx, data.ReadText(data.LocalFiles(p), data.MaxLineBytes(100)), 10)
	var re *data.RowError
	is.True(errors.As(err, &re))
	is.Equal(re.Pos.Source, p)
	is.Equal(re.Pos.Line, int64(2))
	is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
	is.True(strings.Contains(err.Error(), "long.txt:2"))

	var st data.Stats
	got, err := data.Take(ctx, data.ReadText(data.LocalFiles(p), data.MaxLineBytes(100)), 10, data.SkipBadRows(1), data.CollectStats(&st))
	is.NoErr(err)
	is.Equal(got, []string{"short", strings.Repeat("y", 100), "end"}) // 100 bytes and its CRLF fit
	src := st.Operators[0]
	is.Equal(src.RowsIn, int64(4))
	is.Equal(src.RowsIn, src.RowsOut+src.BadRows)
}

// ReadBinaryFiles reads whole files with their names, from local paths
// and buckets, by glob and folder, one file a block; a file over
// MaxFileBytes is a bad row naming it; unreadable files and globs matching
// nothing are errors naming them, with codes.
func TestReadBinaryFiles(t *testing.T) {
	ctx := context.Background()
	is := is.New(t)
	dir := t.TempDir()
	img := []byte{0, 1, 2, 0xff, '\n', '\r'}
	is.NoErr(os.WriteFile(filepath.Join(dir, "a.bin"), img, 0o644))
	is.NoErr(os.WriteFile(filepath.Join(dir, "b.bin"), []byte{}, 0o644))
	is.NoErr(os.WriteFile(filepath.Join(dir, "c.bin"), make([]byte, 1000), 0o644))
	is.NoErr(os.WriteFile(filepath.Join(dir, "d.txt"), []byte("text"), 0o644))
	mem := storage.NewMem()
	defer mem.Close()
	is.NoErr(storage.WriteAll(ctx, mem, "in/x/a.bin", img))

	got, err := data.Take(ctx, data.ReadBinaryFiles(data.LocalFiles(filepath.Join(dir, "*.bin"))), 10)
	is.NoErr(err)
	is.Equal(len(got), 3)
	is.Equal(got[0], data.BinaryFile{Path: filepath.Join(dir, "a.bin"), Bytes: img})
	is.Equal(got[1].Path, filepath.Join(dir, "b.bin"))
	is.Equal(len(got[1].Bytes), 0)
	is.Equal(len(got[2].Bytes), 1000)

	// Bounded memory: a block holds one file, so the source holds a few
	// files at a time and MaxBytesInFlight bounds the bytes held.
	for i := range 5 {
		is.NoErr(storage.WriteAll(ctx, mem, fmt.Sprintf("big/%d.bin", i), make([]byte, 1000)))
	}
	var st data.Stats
	n, err := data.Count(ctx, data.Map(data.ReadBinaryFiles(data.InBucket(mem, "big")), func(_ context.Context, f data.BinaryFile) (int, error) { return len(f.Bytes), nil }),
		data.MaxBytesInFlight(2500), data.CollectStats(&st))
	is.NoErr(err)
	is.Equal(n, int64(5))
	for _, o := range st.Operators {
		is.True(o.PeakBytesInFlight <= 2500)
	}
	is.True(st.Operators[0].PeakBytesInFlight >= 1000)
	// A source admits a block's rows before it reads them: blocks of
	// 1024 rows would show 1024 here.
	is.True(st.Operators[0].PeakRowsInFlight <= 4)

	got, err = data.Take(ctx, data.ReadBinaryFiles(data.InBucket(mem, "in")), 10)
	is.NoErr(err)
	is.Equal(got, []data.BinaryFile{{Path: "in/x/a.bin", Bytes: img}})

	// Too large: a bad row naming the file, skippable.
	_, err = data.Count(ctx, data.ReadBinaryFiles(data.LocalFiles(filepath.Join(dir, "*.bin")), data.MaxFileBytes(999)))
	is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
	is.True(strings.Contains(err.Error(), "c.bin"))
	is.True(strings.Contains(err.Error(), "MaxFileBytes (999 bytes)"))
	n, err = data.Count(ctx, data.ReadBinaryFiles(data.LocalFiles(filepath.Join(dir, "*.bin")), data.MaxFileBytes(999)), data.SkipBadRows(1))
	is.NoErr(err)
	is.Equal(n, int64(2))

	// Unreadable, and a glob matching nothing.
	denied := data.FromStream("secret.bin", func(context.Context) (io.ReadCloser, error) {
		return nil, &fs.PathError{Op: "open", Path: "secret.bin", Err: syscall.EACCES}
	})
	_, err = data.Count(ctx, data.ReadBinaryFiles(denied))
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	var se *data.SourceError
	is.True(errors.As(err, &se))
	is.Equal(se.Pos.Source, "secret.bin")
	_, err = data.Count(ctx, data.ReadText(denied))
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	_, err = data.Count(ctx, data.ReadBinaryFiles(data.LocalFiles(filepath.Join(dir, "*.png"))))
	is.Equal(ray.CodeOf(err), ray.NotFound)
	is.True(strings.Contains(err.Error(), "*.png"))
	_, err = data.Count(ctx, data.ReadText(data.InBucket(mem, "nothing/here/*.txt")))
	is.Equal(ray.CodeOf(err), ray.NotFound)
	is.True(strings.Contains(err.Error(), "nothing/here/*.txt"))
	_, err = data.Count(ctx, data.ReadBinaryFiles(data.LocalFiles(dir), data.MaxFileBytes(0)))
	is.Equal(ray.CodeOf(err), ray.InvalidArgument)
}
