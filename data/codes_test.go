package data_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
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

// Every error of package data carries a code from the closed set (ray.Code
// and errors.Is with the code's sentinel), keeps its message and chain
// (errors.As to *RowError, *SourceError, *PanicError), and names what was
// wrong: for bad input files, the file and the position.
func TestErrorCodes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.jsonl", `{"n":1}`+"\n"+`{"n":2}`+"\n")
	bad := write("bad.jsonl", `{"n":1}`+"\n"+`{"n":`+"\n")
	long := write("long.jsonl", `{"n":1}`+"\n"+`{"n":"`+strings.Repeat("x", 2000)+`"}`+"\n")
	longCSV := write("long.csv", "n\n1\n\""+strings.Repeat("x", 2000)+"\"\n")
	type row struct{ N int }
	type inf struct{ F float64 }
	var nilCtx context.Context
	failing := func(context.Context, int) (int, error) { return 0, errors.New("no good") }
	panicking := func(context.Context, int) (int, error) { panic("boom") }
	denied := data.FromStream("secret.jsonl", func(context.Context) (io.ReadCloser, error) {
		return nil, &fs.PathError{Op: "open", Path: "secret.jsonl", Err: syscall.EACCES}
	})
	broken := data.FromStream("broken.jsonl", func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(strings.NewReader(`{"n":1}`+"\n"), errReader{})), nil
	})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	count := func(ctx context.Context, d *data.Dataset[row], opts ...data.Option) error {
		_, err := data.Count(ctx, d, opts...)
		return err
	}

	cases := []struct {
		name  string
		run   func() error
		code  ray.ErrorCode
		names []string // in the message
	}{
		{"missing file", func() error {
			return count(ctx, data.ReadJSONL[row](data.LocalFiles(filepath.Join(dir, "nope.jsonl"))))
		},
			ray.NotFound, []string{"nope.jsonl"}},
		{"glob matching nothing", func() error { return count(ctx, data.ReadJSONL[row](data.LocalFiles(filepath.Join(dir, "*.parquet")))) },
			ray.NotFound, []string{"*.parquet"}},
		{"key matching nothing in a bucket", func() error {
			return count(ctx, data.ReadJSONL[row](data.InBucket(storage.NewMem(), "in/a.jsonl")))
		}, ray.NotFound, []string{"in/a.jsonl"}},
		{"bad glob", func() error { return count(ctx, data.ReadJSONL[row](data.LocalFiles(filepath.Join(dir, "[")))) },
			ray.InvalidArgument, []string{"glob"}},
		{"no files named", func() error { return count(ctx, data.ReadJSONL[row](data.Files{})) },
			ray.InvalidArgument, []string{"no files named"}},
		{"unreadable file", func() error { return count(ctx, data.ReadJSONL[row](denied)) },
			ray.FailedPrecondition, []string{"secret.jsonl", "row 0"}},
		{"read breaks", func() error { return count(ctx, data.ReadJSONL[row](broken)) },
			ray.Unavailable, []string{"broken.jsonl", "row 1"}},
		{"bad row", func() error { return count(ctx, data.ReadJSONL[row](data.LocalFiles(bad))) },
			ray.InvalidArgument, []string{"bad.jsonl:2"}},
		{"too many bad rows", func() error {
			return count(ctx, data.ReadJSONL[row](data.LocalFiles(bad)), data.SkipBadRows(0))
		}, ray.InvalidArgument, []string{"bad.jsonl:2"}},
		{"JSON line over the limit", func() error {
			return count(ctx, data.ReadJSONL[row](data.LocalFiles(long), data.MaxLineBytes(1000)))
		}, ray.ResourceExhausted, []string{"long.jsonl:2", "MaxLineBytes"}},
		{"CSV record over the limit", func() error {
			return count(ctx, data.ReadCSV[row](data.LocalFiles(longCSV), data.MaxLineBytes(1000)))
		}, ray.ResourceExhausted, []string{"long.csv", "line 3", "MaxLineBytes"}},
		{"CSV row type", func() error {
			_, err := data.Count(ctx, data.ReadCSV[int](data.LocalFiles(longCSV)))
			return err
		}, ray.InvalidArgument, []string{"CSV rows must be"}},
		{"Take n < 0", func() error {
			_, err := data.Take(ctx, data.Range(3), -1)
			return err
		}, ray.InvalidArgument, []string{"Take(-1)"}},
		{"Range n < 0", func() error {
			_, err := data.Count(ctx, data.Range(-1))
			return err
		}, ray.InvalidArgument, []string{"Range(-1)"}},
		{"bad option", func() error {
			_, err := data.Count(ctx, data.Range(3), data.MaxRowsInFlight(0))
			return err
		}, ray.InvalidArgument, []string{"MaxRowsInFlight(0)"}},
		{"batch over the cap", func() error {
			_, err := data.Count(ctx, data.MapBatches(data.Range(3), func(_ context.Context, xs []int) ([]int, error) { return xs, nil },
				data.BatchSize(10), data.MaxRowsInFlight(5)))
			return err
		}, ray.InvalidArgument, []string{"batch size 10"}},
		{"Split n < 1", func() error {
			_, err := data.Split(ctx, data.Range(3), 0)
			return err
		}, ray.InvalidArgument, []string{"Split(0)"}},
		{"function fails", func() error {
			_, err := data.Count(ctx, data.Map(data.Range(3), failing))
			return err
		}, ray.TaskFailed, []string{"range row 0", "no good"}},
		{"function panics", func() error {
			_, err := data.Count(ctx, data.Map(data.Range(3), panicking))
			return err
		}, ray.TaskFailed, []string{"panicked", "boom"}},
		{"cancelled", func() error { return count(cancelled, data.ReadJSONL[row](data.LocalFiles(good))) },
			ray.Canceled, nil},
		{"write to a glob", func() error {
			return data.WriteJSONL(ctx, data.Range(3), data.LocalFiles(filepath.Join(dir, "*.jsonl")))
		}, ray.InvalidArgument, []string{"*.jsonl"}},
		{"write to a stream", func() error { return data.WriteJSONL(ctx, data.Range(3), denied) },
			ray.InvalidArgument, []string{"stream"}},
		{"write a row JSON cannot encode", func() error {
			return data.WriteJSONL(ctx, data.FromItems([]inf{{math.Inf(1)}}), data.LocalFiles(filepath.Join(dir, "inf.jsonl")))
		}, ray.InvalidArgument, []string{"+Inf"}},

		// Nil inputs are errors, not panics.
		{"nil context: Count", func() error { return count(nilCtx, data.ReadJSONL[row](data.LocalFiles(good))) },
			ray.InvalidArgument, []string{"nil context"}},
		{"nil context: Take", func() error {
			_, err := data.Take(nilCtx, data.Range(3), 1)
			return err
		}, ray.InvalidArgument, []string{"nil context"}},
		{"nil context: Rows", func() error {
			for _, err := range data.Rows(nilCtx, data.Range(3)) {
				return err
			}
			return nil
		}, ray.InvalidArgument, []string{"nil context"}},
		{"nil context: Split", func() error {
			_, err := data.Split(nilCtx, data.Range(3), 2)
			return err
		}, ray.InvalidArgument, []string{"nil context"}},
		{"nil context: WriteJSONL", func() error {
			return data.WriteJSONL(nilCtx, data.Range(3), data.LocalFiles(filepath.Join(dir, "out.jsonl")))
		}, ray.InvalidArgument, []string{"nil context"}},
		{"nil context: WriteCSV", func() error {
			return data.WriteCSV(nilCtx, data.FromItems([]row{{1}}), data.LocalFiles(filepath.Join(dir, "out.csv")))
		}, ray.InvalidArgument, []string{"nil context"}},
		{"nil dataset: Count", func() error { return count(ctx, nil) }, ray.InvalidArgument, []string{"nil dataset"}},
		{"nil dataset: Map", func() error {
			_, err := data.Count(ctx, data.Map((*data.Dataset[int])(nil), failing))
			return err
		}, ray.InvalidArgument, []string{"nil"}},
		{"nil function: Map", func() error {
			_, err := data.Count(ctx, data.Map[int, int](data.Range(3), nil))
			return err
		}, ray.InvalidArgument, []string{"nil function"}},
		{"nil Func: Apply", func() error {
			_, err := data.Count(ctx, data.Apply[int, int](data.Range(3), nil))
			return err
		}, ray.InvalidArgument, []string{"nil Func"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			is := is.New(t)
			err := c.run()
			is.True(err != nil)
			t.Log(err)
			is.Equal(ray.CodeOf(err).String(), c.code.String())
			if c.code != ray.Canceled {
				is.True(errors.Is(err, sentinel(c.code)))
			}
			for _, s := range c.names {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not name %q: %v", s, err)
				}
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: "broken.jsonl", Err: syscall.EIO}
}

func sentinel(c ray.ErrorCode) error {
	switch c {
	case ray.InvalidArgument:
		return ray.ErrInvalidArgument
	case ray.NotFound:
		return ray.ErrNotFound
	case ray.FailedPrecondition:
		return ray.ErrFailedPrecondition
	case ray.ResourceExhausted:
		return ray.ErrResourceExhausted
	case ray.Unavailable:
		return ray.ErrUnavailable
	case ray.TaskFailed:
		return ray.ErrTaskFailed
	}
	panic(fmt.Sprintf("no sentinel for %v", c))
}

// The statistics add up: a source's RowsIn counts every row it read, good
// or bad (RowsIn = RowsOut + BadRows), and each operator's RowsIn is what
// it took from upstream.
func TestStatsAddUp(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	var b strings.Builder
	for i := range 10001 {
		if i == 5000 {
			b.WriteString("{\"n\": oops}\n")
			continue
		}
		fmt.Fprintf(&b, "{\"n\":%d}\n", i)
	}
	p := filepath.Join(t.TempDir(), "rows.jsonl")
	is.NoErr(os.WriteFile(p, []byte(b.String()), 0o644))
	type row struct{ N int }
	var st data.Stats
	d := data.Map(data.ReadJSONL[row](data.LocalFiles(p)), func(_ context.Context, r row) (row, error) {
		if r.N == 7 {
			return r, errors.New("seven")
		}
		return r, nil
	})
	n, err := data.Count(ctx, d, data.SkipBadRows(5), data.CollectStats(&st))
	is.NoErr(err)
	is.Equal(n, int64(9999))
	is.Equal(len(st.Operators), 2)
	src, m := st.Operators[0], st.Operators[1]
	t.Log(st)
	is.Equal(src.RowsIn, int64(10001)) // every line read
	is.Equal(src.RowsOut, int64(10000))
	is.Equal(src.BadRows, int64(1))
	is.Equal(src.RowsIn, src.RowsOut+src.BadRows)
	is.Equal(m.RowsIn, src.RowsOut)
	is.Equal(m.RowsIn, m.RowsOut+m.BadRows)
	is.Equal(m.BadRows, int64(1))
	is.Equal(st.Rows, int64(9999))
	is.Equal(len(st.BadRows), 2)
	is.True(strings.Contains(st.String(), "in 10001 out 10000 bad 1"))
}
