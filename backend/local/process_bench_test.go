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
	"time"

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
//
// mode=worker-process-vs-floor alternates the two round trips and reports
// their ratio (x-floor): on a loaded machine the two separate modes see
// different loads, the alternation the same.
func BenchmarkWorkerProcessTasksSync(b *testing.B) {
	b.Run("mode=loopback-floor", benchLoopbackFloor)
	b.Run("mode=worker-process-vs-floor", benchSyncVsFloor)
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
// Get them all. mode=loopback-floor is as in
// BenchmarkWorkerProcessTasksSync; mode=worker-process-vs-floor alternates
// 1000 loopback round trips and 1000 tasks through the worker process and
// reports the task rate as a multiple of the round-trip rate (x-floor).
func BenchmarkWorkerProcessTasksAsync(b *testing.B) {
	b.Run("mode=loopback-floor", benchLoopbackFloor)
	b.Run("mode=worker-process-vs-floor", benchAsyncVsFloor)
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
	roundTrip := startEcho(b)
	for b.Loop() {
		roundTrip()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "round-trips/s")
}

// startEcho starts an echo process and returns a round trip to it: 8
// bytes there and back over loopback TCP. The process ends with b.
func startEcho(b *testing.B) (roundTrip func()) {
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
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	c, err := net.Dial("tcp", strings.TrimSpace(addr))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var buf [8]byte
	return func() {
		if _, err := c.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// workerCluster is a one-node cluster of 64 CPUs with one worker process.
func workerCluster(b *testing.B) *ray.Cluster {
	be, err := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "head", Resources: backend.Resources{backend.CPU: 64}}}},
		&local.Options{Processes: &local.ProcessOptions{Count: 1}})
	if err != nil {
		b.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), be, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// benchSyncVsFloor alternates a loopback round trip and a task round trip
// through the worker process, so that both see the same load, and
// reports their ratio (x-floor) besides each one's time.
func benchSyncVsFloor(b *testing.B) {
	roundTrip := startEcho(b)
	c := workerCluster(b)
	ctx := context.Background()
	var floor, tasks time.Duration
	for b.Loop() {
		t0 := time.Now()
		roundTrip()
		t1 := time.Now()
		if _, err := benchNoop.Remote(ctx, c, struct{}{}).Get(ctx); err != nil {
			b.Fatal(err)
		}
		floor += t1.Sub(t0)
		tasks += time.Since(t1)
	}
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N)/1e3, "floor-µs")
	b.ReportMetric(float64(tasks.Nanoseconds())/float64(b.N)/1e3, "task-µs")
	b.ReportMetric(float64(tasks)/float64(floor), "x-floor")
}

// benchAsyncVsFloor alternates 1000 loopback round trips and 1000 async
// tasks through the worker process, so that both see the same load, and
// reports the task rate as a multiple of the round-trip rate (x-floor).
func benchAsyncVsFloor(b *testing.B) {
	roundTrip := startEcho(b)
	c := workerCluster(b)
	ctx := context.Background()
	refs := make([]ray.ObjectRef[string], 1000)
	var floor, tasks time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range refs {
			roundTrip()
		}
		t1 := time.Now()
		for i := range refs {
			refs[i] = benchNoop.Remote(ctx, c, struct{}{})
		}
		if _, err := ray.GetAll(ctx, refs); err != nil {
			b.Fatal(err)
		}
		floor += t1.Sub(t0)
		tasks += time.Since(t1)
	}
	n := float64(b.N * len(refs))
	b.ReportMetric(n/floor.Seconds(), "round-trips/s")
	b.ReportMetric(n/tasks.Seconds(), "tasks/s")
	b.ReportMetric(float64(floor)/float64(tasks), "x-floor")
}
