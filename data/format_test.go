package data_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/storage"
)

// A toy format through the public hooks: one decimal integer per line.

func readInts(files data.Files, opts ...data.Option) *data.Dataset[int] {
	return data.ReadFiles("read_ints", files, func(ctx context.Context, f data.File, rows data.RowWriter[int]) error {
		rc, err := f.Open(ctx)
		if err != nil {
			return rows.Failed(ctx, data.Pos{Source: f.Name()}, err)
		}
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		var row, line int64
		for sc.Scan() {
			line++
			p := data.Pos{Source: f.Name(), Row: row, Line: line}
			row++
			n, err := strconv.Atoi(sc.Text())
			if err != nil {
				if err := rows.Bad(p, err); err != nil {
					return err
				}
				continue
			}
			if err := rows.Put(n, p); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return rows.Failed(ctx, data.Pos{Source: f.Name(), Row: row}, err)
		}
		return nil
	}, opts...)
}

type intEncoder struct{ w io.Writer }

func (e intEncoder) Write(rows []int) error {
	for _, n := range rows {
		if _, err := fmt.Fprintln(e.w, n); err != nil {
			return err
		}
	}
	return nil
}

func (e intEncoder) Close() error { return nil }

func writeInts(ctx context.Context, d *data.Dataset[int], to data.Files, opts ...data.Option) error {
	return data.WriteFile(ctx, d, to, func(w io.Writer) (data.Encoder[int], error) { return intEncoder{w}, nil }, opts...)
}

func TestCustomFormat(t *testing.T) {
	ctx := context.Background()
	b := storage.NewMem()
	defer b.Close()

	t.Run("round trip", func(t *testing.T) {
		is := is.New(t)
		is.NoErr(writeInts(ctx, data.Range(100), data.InBucket(b, "ints/a.txt")))
		got, err := data.Take(ctx, readInts(data.InBucket(b, "ints")), 1000)
		is.NoErr(err)
		is.Equal(len(got), 100)
		is.Equal(got[99], 99)
	})
	t.Run("bad rows", func(t *testing.T) {
		is := is.New(t)
		is.NoErr(storage.WriteAll(ctx, b, "bad/x.txt", []byte("1\ntwo\n3\n")))
		_, err := data.Count(ctx, readInts(data.InBucket(b, "bad")))
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos.Line, int64(2)) // the bad line is named
		var st data.Stats
		n, err := data.Count(ctx, readInts(data.InBucket(b, "bad")), data.SkipBadRows(5), data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(n, int64(2))
		is.Equal(len(st.BadRows), 1)
	})
	t.Run("failed write leaves nothing", func(t *testing.T) {
		is := is.New(t)
		boom := errors.New("boom")
		d := data.Map(data.Range(10), func(_ context.Context, n int) (int, error) {
			if n == 7 {
				return 0, boom
			}
			return n, nil
		})
		is.True(errors.Is(writeInts(ctx, d, data.InBucket(b, "failed.txt")), boom))
		ok, err := storage.Exists(ctx, b, "failed.txt")
		is.NoErr(err)
		is.True(!ok)
	})
	t.Run("random access on a stream", func(t *testing.T) {
		is := is.New(t)
		src := data.FromStream("stdin", func(context.Context) (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader("0123456789")), nil
		})
		got, err := data.Take(ctx, data.ReadFiles("read_at", src, func(ctx context.Context, f data.File, rows data.RowWriter[string]) error {
			ra, done, err := f.ReaderAt(ctx)
			if err != nil {
				return err
			}
			defer done()
			buf := make([]byte, 3)
			if _, err := ra.ReadAt(buf, ra.Size()-3); err != nil {
				return err
			}
			return rows.Put(string(buf), data.Pos{Source: f.Name()})
		}), 10)
		is.NoErr(err)
		is.Equal(got, []string{"789"})
	})
}
