package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
)

// TestEndpointRefusesBadInput: the report endpoint refuses a request with
// a wrong token, run, rank, method, path or body, and a checkpoint
// directory outside the run's storage or inside its checkpoints, each
// with a status and a message, and logs it; good reports count
// iterations per rank and commit directories. Closing the rendezvous
// leaves no goroutine (goleak in TestMain).
func TestEndpointRefusesBadInput(t *testing.T) {
	is := is.New(t)
	root := t.TempDir()
	bucket, err := storage.Dir(root)
	is.NoErr(err)
	defer bucket.Close()
	var logs bytes.Buffer
	st := &store{b: bucket, prefix: "run/", keep: 3, root: root}
	rz, err := newRendezvous("127.0.0.1:0", "secret", 0, 2, st, []string{"s0"}, time.Second,
		&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil,
		runInfo{run: "run", perSlice: 2, numSlices: 1, log: slog.New(slog.NewTextHandler(&logs, nil))})
	is.NoErr(err)
	defer rz.close(time.Second)
	url := "http://" + rz.addr()
	client := &http.Client{Timeout: time.Minute}
	defer client.CloseIdleConnections()
	do := func(method, path, token, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, url+path, strings.NewReader(body))
		is.NoErr(err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		is.NoErr(err)
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out) //nolint:errcheck // checked by the callers
		return resp.StatusCode, out
	}
	staged := func(name string) string {
		d := filepath.Join(root, "run", "staging", name)
		is.NoErr(os.MkdirAll(d, 0o755))
		is.NoErr(os.WriteFile(filepath.Join(d, "state"), []byte(name), 0o644))
		return d
	}
	outside := t.TempDir()
	is.NoErr(os.MkdirAll(filepath.Join(root, "run"), 0o755))
	is.NoErr(os.Symlink(outside, filepath.Join(root, "run", "link")))

	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		says                            string
	}{
		{"no token", "POST", "/v1/report", "", `{"run":"run","rank":0,"metrics":{}}`, 401, "not a program of attempt 0 of run run"},
		{"wrong token", "POST", "/v1/report", "guess", `{"run":"run","rank":0,"metrics":{}}`, 401, "GORAY_TRAIN_TOKEN"},
		{"unknown run", "POST", "/v1/report", "secret", `{"run":"other","rank":0,"metrics":{}}`, 404, `no run "other" here`},
		{"rank out of range", "POST", "/v1/report", "secret", `{"run":"run","rank":2,"metrics":{}}`, 400, "rank 2 is not in 0..1"},
		{"no rank", "POST", "/v1/report", "secret", `{"run":"run","metrics":{}}`, 400, "no rank"},
		{"not JSON", "POST", "/v1/report", "secret", `loss=1`, 400, "the body is not a report"},
		{"a metric that is no number", "POST", "/v1/report", "secret", `{"run":"run","rank":0,"metrics":{"loss":"low"}}`, 400, "the body is not a report"},
		{"an unknown field", "POST", "/v1/report", "secret", `{"run":"run","rank":0,"metric":{}}`, 400, `unknown field "metric"`},
		{"a body over 1 MiB", "POST", "/v1/report", "secret", `{"run":"run","rank":0,"metrics":{"` + strings.Repeat("x", 2<<20) + `":1}}`, 413, "the body is not a report"},
		{"checkpoint outside the storage", "POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":%q}`, outside), 400, "is outside the run's storage"},
		{"checkpoint through a symlink out", "POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":%q}`, filepath.Join(root, "run", "link")), 400, "is outside the run's storage"},
		{"checkpoint up and out", "POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":%q}`, filepath.Join(root, "run", "..")), 400, "is outside the run's storage"},
		{"relative checkpoint", "POST", "/v1/report", "secret", `{"run":"run","rank":0,"metrics":{},"checkpoint_dir":"staging/x"}`, 400, "is not an absolute path"},
		{"missing checkpoint", "POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":%q}`, filepath.Join(root, "run", "nothing")), 400, "no such file"},
		{"GET a report", "GET", "/v1/report", "secret", "", 405, "use POST"},
		{"POST the world", "POST", "/v1/world?run=run&rank=0", "secret", "", 405, "use GET"},
		{"unknown path", "GET", "/v2/world", "secret", "", 404, "use GET /v1/world or POST /v1/report"},
		{"world of a bad rank", "GET", "/v1/world?run=run&rank=x", "secret", "", 400, `rank "x" is not a number`},
		{"world of another run", "GET", "/v1/world?run=nope&rank=0", "secret", "", 404, `no run "nope" here`},
	} {
		status, out := do(tc.method, tc.path, tc.token, tc.body)
		if status != tc.status || !strings.Contains(fmt.Sprint(out["error"]), tc.says) {
			t.Errorf("%s: status %d %v; want %d saying %q", tc.name, status, out, tc.status, tc.says)
		}
	}
	is.True(strings.Contains(logs.String(), "refused a program's request"))
	is.True(strings.Contains(logs.String(), "status=401"))

	// Refused reports counted nothing: these are iteration 1 of each rank.
	status, out := do("POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{"loss":0.5},"checkpoint_dir":%q}`, staged("a")))
	is.Equal(status, 200)
	is.Equal(out["iteration"], 1.0)
	is.Equal(out["checkpoint"], true)
	status, out = do("POST", "/v1/report", "secret", `{"run":"run","rank":1,"metrics":{"loss":0.7}}`)
	is.Equal(status, 200)
	is.Equal(out["iteration"], 1.0)
	ck, err := st.latest(t.Context())
	is.NoErr(err)
	is.Equal(ck.Iteration, 1)
	is.Equal(ck.Dirs, []int{0})
	is.Equal(ck.Metrics["loss"], 0.5)
	d, err := (&Checkpoint{Iteration: 1, Dirs: []int{0}, store: st}).Dir(0)
	is.NoErr(err)
	b, err := os.ReadFile(filepath.Join(d, "state"))
	is.NoErr(err)
	is.Equal(string(b), "a")
	// A committed checkpoint is not a staging area.
	status, out = do("POST", "/v1/report", "secret", fmt.Sprintf(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":%q}`, d))
	is.Equal(status, 400)
	is.True(strings.Contains(fmt.Sprint(out["error"]), "inside the run's committed checkpoints"))

	status, out = do("GET", "/v1/world?run=run&rank=1", "secret", "")
	is.Equal(status, 200)
	is.Equal(out["world_size"], 2.0)
	is.Equal(out["storage"], filepath.Join(root, "run"))
	is.Equal(out["checkpoint"], nil)
}

// TestEndpointMemStorage: a checkpoint directory cannot go to storage in
// the driver's memory: 409, saying what to set.
func TestEndpointMemStorage(t *testing.T) {
	is := is.New(t)
	bucket := storage.NewMem()
	defer bucket.Close()
	rz, err := newRendezvous("127.0.0.1:0", "secret", 0, 1, &store{b: bucket, prefix: "run/", keep: 3}, nil, time.Second,
		&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil, runInfo{run: "run", perSlice: 1, numSlices: 1})
	is.NoErr(err)
	defer rz.close(time.Second)
	req, err := http.NewRequest("POST", "http://"+rz.addr()+"/v1/report", strings.NewReader(`{"run":"run","rank":0,"metrics":{},"checkpoint_dir":"/tmp/x"}`))
	is.NoErr(err)
	req.Header.Set("Authorization", "Bearer secret")
	client := &http.Client{}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	is.NoErr(err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	is.Equal(resp.StatusCode, 409)
	is.True(strings.Contains(string(body), "set RunConfig.Storage to file://"))
}

// TestEndpointCommitsByCopy: on a bucket without renames (gs://, here a
// mem:// bucket standing for one), a committed directory's objects are
// copied into the checkpoint and the staged ones deleted; a directory
// outside the run's URL, or with no object, is refused.
func TestEndpointCommitsByCopy(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	bucket := storage.NewMem()
	defer bucket.Close()
	st := &store{b: bucket, prefix: "run/", keep: 3, base: "gs://b/runs"}
	rz, err := newRendezvous("127.0.0.1:0", "secret", 0, 1, st, nil, time.Second,
		&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil, runInfo{run: "run", perSlice: 1, numSlices: 1})
	is.NoErr(err)
	defer rz.close(time.Second)
	client := &http.Client{}
	defer client.CloseIdleConnections()
	report := func(dir string) (int, string) {
		req, err := http.NewRequest("POST", "http://"+rz.addr()+"/v1/report", strings.NewReader(fmt.Sprintf(`{"run":"run","rank":0,"metrics":{"loss":1},"checkpoint_dir":%q}`, dir)))
		is.NoErr(err)
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := client.Do(req)
		is.NoErr(err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	is.NoErr(storage.WriteAll(ctx, bucket, "run/staging/x/params", []byte("weights")))
	is.NoErr(storage.WriteAll(ctx, bucket, "run/staging/x/opt/state", []byte("moments")))

	status, body := report("gs://b/runs/other/staging/x")
	is.Equal(status, 400)
	is.True(strings.Contains(body, "is outside the run's storage gs://b/runs/run"))
	status, body = report("gs://b/runs/run/staging/empty")
	is.Equal(status, 400)
	is.True(strings.Contains(body, "holds no object"))
	status, body = report("gs://b/runs/run/staging/x/")
	is.Equal(status, 200)
	is.True(strings.Contains(body, `"iteration":1`))

	ck, err := st.latest(ctx)
	is.NoErr(err)
	is.Equal(ck.Dirs, []int{0})
	d, err := ck.Dir(0)
	is.NoErr(err)
	is.Equal(d, "gs://b/runs/run/checkpoint_000000001/rank_00000")
	for key, want := range map[string]string{"params": "weights", "opt/state": "moments"} {
		b, err := storage.ReadAll(ctx, bucket, "run/checkpoint_000000001/rank_00000/"+key)
		is.NoErr(err)
		is.Equal(string(b), want)
	}
	for obj, err := range bucket.List(ctx, "run/staging/") {
		is.NoErr(err)
		t.Errorf("%s was left in the staging area", obj.Key)
	}
}
