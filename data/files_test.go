package data_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/storage"
)

type record struct {
	ID    int     `json:"id" csv:"id"`
	Name  string  `json:"name" csv:"name"`
	Score float64 `json:"score" csv:"score"`
}

func records(n int) []record {
	out := make([]record, n)
	for i := range out {
		out[i] = record{ID: i, Name: fmt.Sprintf("r%d", i), Score: float64(i) / 4}
	}
	return out
}

// TestRoundTrip writes each format to a bucket and reads it back, on
// mem://, file:// and the local disk, from a file, a folder and a glob.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fileBucket, err := storage.Open(ctx, "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer fileBucket.Close()
	memBucket := storage.NewMem()
	defer memBucket.Close()
	localDir := t.TempDir()

	formats := []struct {
		ext   string
		write func(context.Context, *data.Dataset[record], data.Files, ...data.Option) error
		read  func(data.Files, ...data.Option) *data.Dataset[record]
	}{
		{"jsonl", data.WriteJSONL[record], data.ReadJSONL[record]},
		{"csv", data.WriteCSV[record], data.ReadCSV[record]},
	}
	stores := []struct {
		name string
		at   func(pattern string) data.Files
	}{
		{"mem", func(p string) data.Files { return data.InBucket(memBucket, p) }},
		{"file", func(p string) data.Files { return data.InBucket(fileBucket, p) }},
		{"local", func(p string) data.Files { return data.LocalFiles(filepath.Join(localDir, p)) }},
	}
	rows := records(1000)
	for _, st := range stores {
		for _, f := range formats {
			t.Run(st.name+"/"+f.ext, func(t *testing.T) {
				is := is.New(t)
				// Two files in a folder: rows 0..599 and 600..999.
				is.NoErr(f.write(ctx, data.FromItems(rows[:600]), st.at("out/"+f.ext+"/a."+f.ext)))
				is.NoErr(f.write(ctx, data.FromItems(rows[600:]), st.at("out/"+f.ext+"/b."+f.ext)))
				for _, pattern := range []string{"out/" + f.ext, "out/" + f.ext + "/*." + f.ext} {
					got, err := data.Take(ctx, f.read(st.at(pattern), data.BlockRows(64)), 2000)
					is.NoErr(err)
					is.Equal(got, rows) // folder and glob read both files in key order
				}
				got, err := data.Take(ctx, f.read(st.at("out/"+f.ext+"/b."+f.ext)), 2000)
				is.NoErr(err)
				is.Equal(got, rows[600:]) // one file
				n, err := data.Count(ctx, f.read(st.at("out/"+f.ext)), data.Unordered())
				is.NoErr(err)
				is.Equal(n, int64(1000))
			})
		}
	}
}

func TestNoFiles(t *testing.T) {
	ctx := context.Background()
	b := storage.NewMem()
	defer b.Close()
	tests := []struct{ pattern, msg string }{
		{"nothing/*.jsonl", `no files match "nothing/*.jsonl"`},
		{"missing.jsonl", `no files match "missing.jsonl"`},
		{"bad[", "bad glob"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			is := is.New(t)
			_, err := data.Count(ctx, data.ReadJSONL[record](data.InBucket(b, tt.pattern)))
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), tt.msg))
		})
	}
}

// TestBadRows reads a JSON Lines file with two bad lines: by default the
// run fails naming the first one's file, line and cause; with SkipBadRows
// it skips and reports both, and fails past the cap.
func TestBadRows(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	lines := []string{`{"id":0}`, `{"id":1}`, `{"id":`, `{"id":3}`, ``, `{"id":"four"}`, `{"id":5}`}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := data.ReadJSONL[record](data.LocalFiles(path))
	t.Run("fail", func(t *testing.T) {
		is := is.New(t)
		var st data.Stats
		_, err := data.Count(ctx, src, data.CollectStats(&st))
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos, data.Pos{Source: path, Row: 2, Line: 3})
		is.True(strings.Contains(err.Error(), "in.jsonl:3"))
		is.True(strings.Contains(err.Error(), "unexpected end of JSON input"))
		is.Equal(st.Err, err)
	})
	t.Run("skip", func(t *testing.T) {
		is := is.New(t)
		var st data.Stats
		got, err := data.Take(ctx, src, 10, data.SkipBadRows(2), data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(len(got), 4)
		is.Equal([]int{got[0].ID, got[1].ID, got[2].ID, got[3].ID}, []int{0, 1, 3, 5})
		is.Equal(len(st.BadRows), 2)
		is.Equal(st.BadRows[0].Pos.Line, int64(3))
		is.Equal(st.BadRows[1].Pos.Line, int64(6))
		is.True(strings.Contains(st.BadRows[1].Err.Error(), "cannot unmarshal string"))
		is.Equal(st.Operators[0].BadRows, int64(2))
	})
	t.Run("over cap", func(t *testing.T) {
		is := is.New(t)
		_, err := data.Count(ctx, src, data.SkipBadRows(1))
		is.True(errors.Is(err, data.ErrTooManyBadRows))
		var re *data.RowError
		is.True(errors.As(err, &re))
		is.Equal(re.Pos.Line, int64(6)) // the second bad row broke the cap
	})
	t.Run("operator", func(t *testing.T) {
		is := is.New(t)
		fail7 := func(_ context.Context, x int) (int, error) {
			if x%7 == 6 {
				return 0, fmt.Errorf("%d is unlucky", x)
			}
			return x, nil
		}
		var st data.Stats
		n, err := data.Count(ctx, data.Map(data.Range(70), fail7, data.Name("lucky")), data.SkipBadRows(10), data.CollectStats(&st))
		is.NoErr(err)
		is.Equal(n, int64(60))
		is.Equal(len(st.BadRows), 10)
		is.Equal(st.BadRows[0].Op, "lucky")
		is.Equal(st.BadRows[0].Pos, data.Pos{Source: "range", Row: 6})
		_, err = data.Count(ctx, data.Map(data.Range(70), fail7))
		is.Equal(err.Error(), "data: map: bad row at range row 6: 6 is unlucky")
	})
}

// failingReader returns n bytes of good lines, then an error.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// TestSourceFailsMidRead reads a stream that breaks after 500 good lines:
// the run fails with a SourceError naming the source and the row, even
// when bad rows are skipped, and leaves no output file.
func TestSourceFailsMidRead(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	var good strings.Builder
	for i := range 500 {
		fmt.Fprintf(&good, `{"id":%d}`+"\n", i)
	}
	broken := errors.New("connection reset")
	src := data.ReadJSONL[record](data.FromStream("stream", func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(&failingReader{r: strings.NewReader(good.String()), err: broken}), nil
	}), data.BlockRows(16))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	err := data.WriteJSONL(ctx, src, data.LocalFiles(out), data.SkipBadRows(100))
	var se *data.SourceError
	is.True(errors.As(err, &se))
	is.True(errors.Is(err, broken))
	is.Equal(se.Pos.Source, "stream")
	is.Equal(se.Pos.Row, int64(500))
	_, statErr := os.Stat(out)
	is.True(os.IsNotExist(statErr)) // the failed write left nothing
	entries, _ := os.ReadDir(filepath.Dir(out))
	is.Equal(len(entries), 0) // not even a temporary file
}
