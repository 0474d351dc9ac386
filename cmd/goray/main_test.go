package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) {
	ray.Main() // the worker pods of the e2e tests run this test binary
	if testProgram != nil {
		testProgram() // the e2e build's driver program, when its env says so
	}
	goleak.VerifyTestMain(m, leakOptions...)
}

// testProgram, set by the e2e build, runs this test binary as a program
// of its own (a driver in a pod) when its environment asks, and exits.
var testProgram func()

// leakOptions are goroutines goleak ignores: the e2e build adds the
// harness's process-lifetime ones.
var leakOptions []goleak.Option

const clusterFile = "testdata/tpu-cluster.json"

func TestCommands(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"nodes": [{"name": "a", "resources": {"CPU": 1}, "colour": "red"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noTPU := filepath.Join(dir, "cpu.json")
	if err := os.WriteFile(noTPU, []byte(`{"nodes": [{"name": "a", "resources": {"CPU": 1}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{"no command", nil, exitUsage, nil, []string{"Available Commands", "missing command"}},
		{"help", []string{"--help"}, exitOK, []string{"Exit codes: 0 on success, 1 when the command failed, 2 on a usage error"}, nil},
		{"unknown command", []string{"bogus"}, exitUsage, nil, []string{`unknown command "bogus"`, "goray --help"}},
		{"unknown flag", []string{"slices", "--bogus"}, exitUsage, nil, []string{"unknown flag: --bogus", "goray slices --help"}},

		{"slices help says how to read a Kubernetes cluster", []string{"slices", "--help"}, exitOK, []string{"--kubeconfig (and optionally --context) reads a Kubernetes cluster", "backend/kubernetes", "--namespace string"}, nil},
		{"slices", []string{"slices", "--cluster", clusterFile}, exitOK, []string{
			"v6e        4x4             3      3      3        0",
			"v6e-16-2 (v6e 4x4, 4 hosts): free\n  .0 .0 .1 .1\n",
			"v5p-16-0 (v5p 2x2x2, 2 hosts): free\n  .0 .0   .1 .1\n",
		}, nil},
		{"slices as JSON", []string{"slices", "--cluster", clusterFile, "--json"}, exitOK, []string{`"Name": "v6e-64-0"`}, nil},
		{"slices of a cluster without TPUs", []string{"slices", "--cluster", noTPU}, exitOK, []string{"has no TPU slices"}, nil},
		{"slices without a cluster", []string{"slices"}, exitUsage, nil, []string{"--cluster FILE (a simulator cluster file) or --kubeconfig PATH (a Kubernetes cluster) is required"}},
		{"slices of two clusters", []string{"slices", "--cluster", clusterFile, "--kubeconfig", "k"}, exitUsage, nil, []string{"give one of them"}},
		{"slices with a namespace alone", []string{"slices", "--cluster", clusterFile, "--namespace", "ml"}, exitUsage, nil, []string{"--namespace applies to a Kubernetes cluster"}},
		{"slices of a missing kubeconfig", []string{"slices", "--kubeconfig", filepath.Join(dir, "none.yaml")}, exitError, nil, []string{"load kubeconfig", "none.yaml"}},
		{"slices of a missing file", []string{"slices", "--cluster", filepath.Join(dir, "none.json")}, exitError, nil, []string{"none.json", "no such file"}},
		{"slices of a bad file", []string{"slices", "--cluster", bad}, exitError, nil, []string{`unknown field "colour"`}},
		{"slices with an argument", []string{"slices", "extra"}, exitUsage, nil, []string{`unknown command "extra"`}},

		{"validate", []string{"validate", "v6e", "4x4"}, exitOK, []string{
			"hosts:                   4", "chips per host:          4", "pod type:                v6e-16",
			"cloud.google.com/gke-tpu-topology=4x4", "TPU-v6e-16-head=1",
		}, nil},
		{"validate a Ray spelling", []string{"validate", "TPU-V5P", "2x2x2"}, exitOK, []string{"shape:                   v5p 2x2x2", "hosts:                   2"}, nil},
		{"validate a shape with a choice", []string{"validate", "v6e", "2x4", "--chips-per-host", "4"}, exitOK, []string{"hosts:                   2", "chips per host choices:  4 8"}, nil},
		{"validate v7x processes", []string{"validate", "tpu7x", "2x2x2"}, exitOK, []string{"processes per host:      2"}, nil},
		{"validate a bad topology", []string{"validate", "v6e", "4x5"}, exitError, nil, []string{`topology "4x5" is not valid for v6e; valid: 1x1, 2x2`}},
		{"validate a bad generation", []string{"validate", "v9", "4x4"}, exitError, nil, []string{`unknown TPU generation "v9"; valid: v2`}},
		{"validate bad chips per host", []string{"validate", "v6e", "4x4", "--chips-per-host", "3"}, exitError, nil, []string{"invalid chips per host 3 for v6e 4x4", "valid: 4"}},
		{"validate negative chips per host", []string{"validate", "v6e", "4x4", "--chips-per-host", "-1"}, exitUsage, nil, []string{"negative"}},
		{"validate lists a generation's topologies", []string{"validate", "v6e"}, exitOK, []string{"v6e offers 9 topologies:", "  TOPOLOGY   CHIPS  HOSTS", "  4x4           16      4", "  16x16        256     64"}, nil},
		{"validate without arguments", []string{"validate"}, exitUsage, nil, []string{"wants GENERATION and optionally TOPOLOGY; got 0 arguments"}},
		{"validate a 2D topology of a 3D generation", []string{"validate", "v5p", "4x4"}, exitError, nil, []string{`topology "4x4" is two-dimensional, but v5p topologies are three-dimensional, such as 2x2x1, 2x2x2,`, "in all; goray validate v5p lists them)"}},
		{"validate a pod type as the generation", []string{"validate", "v6e-16", "4x4"}, exitError, nil, []string{`"v6e-16" is a pod type (16 chips of v6e), not a TPU generation; did you mean v6e 2x8 or v6e 4x4?`}},
		{"validate an empty generation", []string{"validate", "", "4x4"}, exitError, nil, []string{"the TPU generation is empty; valid: v2, v3"}},

		{"dashboard without a cluster file", []string{"dashboard"}, exitUsage, nil, []string{"--cluster FILE or --driver ADDR is required"}},
		{"dashboard of a file and a driver", []string{"dashboard", "--cluster", clusterFile, "--driver", "127.0.0.1:1"}, exitUsage, nil, []string{"give one of them"}},
		{"status without a driver", []string{"status"}, exitUsage, nil, []string{"--driver ADDR is required"}},
		{"status with a bad timeout", []string{"status", "--driver", "127.0.0.1:1", "--timeout", "0s"}, exitUsage, nil, []string{"--timeout 0s must be positive"}},
		{"status of a bad address", []string{"status", "--driver", "ftp://x"}, exitError, nil, []string{"want host:port or an http(s) URL"}},
		{"dashboard with a bad interval", []string{"dashboard", "--cluster", clusterFile, "--interval", "0s"}, exitUsage, nil, []string{"--interval 0s must be positive"}},
		{"dashboard with a bad duration", []string{"dashboard", "--cluster", clusterFile, "--demo", "soon"}, exitUsage, nil, []string{"--demo"}},
		{"dashboard on a bad address", []string{"dashboard", "--cluster", clusterFile, "--addr", "127.0.0.1:99999"}, exitError, nil, []string{"listen on 127.0.0.1:99999"}},
		{"dashboard help says how to expose it", []string{"dashboard", "--help"}, exitOK, []string{"read-only", "ssh -L"}, nil},
		{"dashboard off loopback without a token", []string{"dashboard", "--cluster", clusterFile, "--addr", "0.0.0.0:0"}, exitUsage, nil, []string{"--addr 0.0.0.0:0 is not a loopback address: give --token TOKEN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stdout, &stderr)
			is.Equal(code, tt.code)
			for _, s := range tt.stdout { // compared with runs of spaces and newlines as one space
				if !strings.Contains(squash(stdout.String()), squash(s)) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
		})
	}
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestDashboardDemo runs goray dashboard --demo and watches a slice get
// reserved and released through the event stream, then interrupts it.
func TestDashboardDemo(t *testing.T) {
	is := is.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"dashboard", "--cluster", clusterFile, "--addr", "127.0.0.1:0", "--interval", "5ms", "--demo", "20ms"}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	is.NoErr(err)
	go io.Copy(io.Discard, pr)
	url, ok := strings.CutPrefix(strings.Fields(line)[3], "http://")
	is.True(ok) // "goray dashboard: serving http://ADDR/ ..."
	is.True(strings.HasPrefix(url, "127.0.0.1:"))

	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+url+"api/events", nil)
	is.NoErr(err)
	resp, err := http.DefaultClient.Do(req)
	is.NoErr(err)
	r := bufio.NewReader(resp.Body)
	// Wait for the demo's slice to be reserved, then released.
	seen := []string{}
	for len(seen) < 2 {
		data, err := r.ReadString('\n')
		is.NoErr(err) // the 30s deadline ends a stream that never changes
		payload, ok := strings.CutPrefix(data, "data: ")
		if !ok {
			continue
		}
		var v dashboard.View
		is.NoErr(json.Unmarshal([]byte(payload), &v))
		state := v.Shapes[0].Slices[0].State
		if state == dashboard.StateReserved && v.Shapes[0].Slices[0].GroupName == "demo" && len(seen) == 0 {
			seen = append(seen, state)
		}
		if state == dashboard.StateFree && len(seen) == 1 {
			seen = append(seen, state)
		}
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	interrupt()
	is.Equal(<-done, exitOK)
	is.Equal(stderr.String(), "")
}
