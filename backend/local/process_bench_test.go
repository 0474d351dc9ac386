//go:build unix

package local_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// The worker-process benchmarks run Ray's microbenchmark task (a no-op
// returning "ok") through one worker process on loopback, against the
// same cluster in process, in the same run. Reproduce: see
// docs/workers.md.

var benchNoop = ray.NewTask("proctest.noop", func(ctx context.Context, _ struct{}) (string, error) { return "ok", nil })

// workerModes runs f on a one-node cluster of 64 CPUs (the host Ray's
// published numbers come from), in process and with one worker process.
func workerModes(b *testing.B, f func(b *testing.B, c *ray.Cluster)) {
	for _, m := range []struct {
		name string
		opts *local.Options
	}{
		{"mode=in-process", nil},
		{"mode=worker-process", &local.Options{Processes: &local.ProcessOptions{Count: 1}}},
	} {
		b.Run(m.name, func(b *testing.B) {
			be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "head", Resources: backend.Resources{backend.CPU: 64}}}}, m.opts)
			if err != nil {
				b.Fatal(err)
			}
			c, err := ray.NewCluster(context.Background(), be, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.ReportAllocs()
			f(b, c)
		})
	}
}

// BenchmarkWorkerProcessTasksSync is a task round trip: submit, Get,
// repeat. mode=loopback-floor is the floor of any round trip to another
// process: 8 bytes to an echo process and back over loopback TCP.
func BenchmarkWorkerProcessTasksSync(b *testing.B) {
	b.Run("mode=loopback-floor", benchLoopbackFloor)
	workerModes(b, func(b *testing.B, c *ray.Cluster) {
		ctx := context.Background()
		for b.Loop() {
			if _, err := benchNoop.Remote(ctx, c, struct{}{}).Get(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	})
}

// BenchmarkWorkerProcessTasksAsync is async throughput: submit 1000, then
// Get them all.
func BenchmarkWorkerProcessTasksAsync(b *testing.B) {
	workerModes(b, func(b *testing.B, c *ray.Cluster) {
		ctx := context.Background()
		refs := make([]ray.ObjectRef[string], 1000)
		for b.Loop() {
			for i := range refs {
				refs[i] = benchNoop.Remote(ctx, c, struct{}{})
			}
			if _, err := ray.GetAll(ctx, refs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(refs))/b.Elapsed().Seconds(), "tasks/s")
	})
}

const echoServerEnv = "PROCTEST_ECHO_SERVER"

// serveEcho echoes 8-byte messages on one loopback connection.
func serveEcho() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	fmt.Println(ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return 1
	}
	var buf [8]byte
	for {
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			return 0
		}
		if _, err := c.Write(buf[:]); err != nil {
			return 0
		}
	}
}

func benchLoopbackFloor(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), echoServerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", strings.TrimSpace(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var buf [8]byte
	for b.Loop() {
		if _, err := c.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "round-trips/s")
}
