package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goray-dev/goray/storage"
)

// BenchmarkProgramReport: one report of a program (POST /v1/report with
// three metrics, over a kept-alive loopback connection, the way
// goray_train's client and every HTTP client reuse one) through the
// driver's endpoint, stored and passed to the progress sink, against the
// same POST to a bare net/http server on loopback whose handler decodes
// the body and answers the same JSON. Each op does one of each, in turn,
// so that both see the same load of a shared machine; metrics:
// endpoint-us and bare-us per request, and x-bare, their ratio.
func BenchmarkProgramReport(b *testing.B) {
	body := []byte(`{"run":"bench","rank":0,"metrics":{"loss":0.125,"accuracy":0.5,"lr":0.001}}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	post := func(url string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck // drained for reuse
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}

	bucket := storage.NewMem()
	defer bucket.Close()
	rz, err := newRendezvous("127.0.0.1:0", "secret", 0, 1, &store{b: bucket, prefix: "bench/", keep: 3}, nil, time.Second,
		&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil, runInfo{run: "bench", perSlice: 1, numSlices: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer rz.close(time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body reportRequest
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n++
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(reportReply{Iteration: n}) //nolint:errcheck // the client went away
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed
	}()
	defer func() { srv.Close(); <-served }()

	endpointURL, bareURL := "http://"+rz.addr()+"/v1/report", "http://"+ln.Addr().String()+"/v1/report"
	post(endpointURL) // connect both
	post(bareURL)
	var endpoint, bare time.Duration
	for b.Loop() {
		endpoint += post(endpointURL)
		bare += post(bareURL)
	}
	b.ReportMetric(float64(endpoint.Microseconds())/float64(b.N), "endpoint-us")
	b.ReportMetric(float64(bare.Microseconds())/float64(b.N), "bare-us")
	b.ReportMetric(float64(endpoint)/float64(bare), "x-bare")
}

// BenchmarkCheckpointCommit: 8 ranks each commit a checkpoint directory
// holding one 64 MiB file (staged under the run's file:// storage, as
// goray_train.staging_dir makes them) with concurrent reports of the same
// iteration, until every report is acknowledged and the checkpoint is
// complete; against cp -r of the same 8 directories in the same run.
// Writing the staged files is not timed in either.
func BenchmarkCheckpointCommit(b *testing.B) {
	const ranks, size = 8, 64 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	stage := func(b *testing.B, dir string) []string {
		b.Helper()
		dirs := make([]string, ranks)
		for r := range ranks {
			dirs[r] = filepath.Join(dir, fmt.Sprintf("rank_%05d-%d", r, time.Now().UnixNano()))
			if err := os.MkdirAll(dirs[r], 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dirs[r], "params"), payload, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		return dirs
	}
	b.Run("endpoint", func(b *testing.B) {
		root := b.TempDir()
		bucket, err := storage.Dir(root)
		if err != nil {
			b.Fatal(err)
		}
		defer bucket.Close()
		st := &store{b: bucket, prefix: "bench/", keep: 1, root: root}
		rz, err := newRendezvous("127.0.0.1:0", "secret", 0, ranks, st, nil, time.Second,
			&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil, runInfo{run: "bench", perSlice: ranks, numSlices: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer rz.close(time.Second)
		client := &http.Client{}
		defer client.CloseIdleConnections()
		it := 0
		b.SetBytes(ranks * size)
		for b.Loop() {
			b.StopTimer()
			dirs := stage(b, filepath.Join(root, "bench", "staging"))
			it++
			b.StartTimer()
			var wg sync.WaitGroup
			for r, d := range dirs {
				wg.Go(func() {
					body := fmt.Sprintf(`{"run":"bench","rank":%d,"metrics":{"loss":1},"checkpoint_dir":%q}`, r, d)
					req, _ := http.NewRequest("POST", "http://"+rz.addr()+"/v1/report", strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer secret")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body) //nolint:errcheck // drained for reuse
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
					}
				})
			}
			wg.Wait()
		}
		b.StopTimer()
		if ck, err := st.latest(b.Context()); err != nil || ck == nil || ck.Iteration != it || len(ck.Dirs) != ranks {
			b.Fatalf("latest checkpoint %+v, %v; want iteration %d with %d directories", ck, err, it, ranks)
		}
	})
	b.Run("cp", func(b *testing.B) {
		root := b.TempDir()
		b.SetBytes(ranks * size)
		for b.Loop() {
			b.StopTimer()
			dirs := stage(b, filepath.Join(root, "staging"))
			dst := filepath.Join(root, "copy")
			os.RemoveAll(dst)
			if err := os.MkdirAll(dst, 0o755); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if out, err := exec.Command("cp", append(append([]string{"-r"}, dirs...), dst)...).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v: %s", err, out)
			}
			b.StopTimer()
			os.RemoveAll(filepath.Join(root, "staging"))
			b.StartTimer()
		}
	})
}
