//go:build e2e

package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/train"
)

type k8sBenchCfg struct{ Len, Iters int }

// k8sBenchLoop times Iters AllReduces of Len float32 between two
// barriers; rank 0 reports the seconds.
var k8sBenchLoop = train.NewLoop("k8stest.bench", func(ctx context.Context, w *train.Worker, cfg k8sBenchCfg) error {
	xs := make([]float32, cfg.Len)
	for i := range xs {
		xs[i] = float32(w.Rank())
	}
	if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil { // warm up
		return err
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	for range cfg.Iters {
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	return w.Report(ctx, train.Metrics{"seconds": time.Since(start).Seconds()}, nil)
})

// tcpSink accepts connections on its pod's IP and reads each to the end,
// then answers one byte, so a sender's time includes the receiving.
type tcpSink struct{ l net.Listener }

var (
	tcpSinkClass = ray.NewActorClass("k8stest.tcpsink", func(ctx context.Context, _ struct{}) (*tcpSink, error) {
		l, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("POD_IP"), "0"))
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					if _, err := io.Copy(io.Discard, c); err == nil {
						_, _ = c.Write([]byte{1})
					}
				}()
			}
		}()
		return &tcpSink{l: l}, nil
	})
	tcpSinkAddr = ray.NewMethod(tcpSinkClass, "addr", func(ctx context.Context, s *tcpSink, _ struct{}) (string, error) {
		return s.l.Addr().String(), nil
	})
	tcpSinkClose = ray.NewMethod(tcpSinkClass, "close", func(ctx context.Context, s *tcpSink, _ struct{}) (struct{}, error) {
		return struct{}{}, s.l.Close()
	})
)

type tcpSendIn struct {
	Addr  string
	Bytes int64
}

// tcpSend sends Bytes to a tcpSink and returns the seconds until the
// sink had them all.
var tcpSend = ray.NewTask("k8stest.tcpsend", func(ctx context.Context, in tcpSendIn) (float64, error) {
	c, err := net.Dial("tcp", in.Addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	start := time.Now()
	for sent := int64(0); sent < in.Bytes; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
})

// BenchmarkE2EAllReduce measures, in one run on one control plane with
// network-isolated pods (each its own network namespace, traffic through
// the harness's bridge):
//
//   - pods=4 and pods=8: AllReduce of 1M float32 (4 MB) across the worker
//     pods of one and two v6e 4x4 slices (train's ring, over TCP between
//     pods);
//   - in-process/workers=4 and 8: the same ring on the simulator, every
//     worker in this process;
//   - sum/workers=4 and 8: the same data summed in one goroutine;
//   - tcp/pod-to-pod: the raw TCP bandwidth from one pod to another (64 MB
//     per op), the wire the ring runs on.
//
// algbw-GB/s is the vector's size over one AllReduce's time, busbw-GB/s
// that times 2(n-1)/n (what each worker sends and receives).
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2EAllReduce -benchtime 20x -count 3 ./
func BenchmarkE2EAllReduce(b *testing.B) {
	const n = 1 << 20
	_, c := slicesCluster(b, "4x4", []string{"slice-a", "slice-b"}, nil)
	report := func(b *testing.B, seconds float64, workers int) {
		perOp := seconds / float64(b.N)
		b.ReportMetric(perOp*1e9, "ns/op")
		b.ReportMetric(4*n/perOp/1e9, "algbw-GB/s")
		b.ReportMetric(4*n/perOp/1e9*2*float64(workers-1)/float64(workers), "busbw-GB/s")
	}
	for _, workers := range []int{4, 8} {
		ring := func(b *testing.B, c *ray.Cluster) {
			tr, err := train.New(c, k8sBenchLoop, k8sBenchCfg{Len: n, Iters: b.N},
				train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: workers / 4},
				train.RunConfig{Name: "bench", Progress: train.ProgressOff})
			if err != nil {
				b.Fatal(err)
			}
			res, err := tr.Fit(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			report(b, res.Metrics["seconds"], workers)
		}
		b.Run(fmt.Sprintf("pods=%d", workers), func(b *testing.B) { ring(b, c) })
		b.Run(fmt.Sprintf("in-process/workers=%d", workers), func(b *testing.B) {
			lb, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: workers / 4}}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			lc, err := ray.NewCluster(b.Context(), lb, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer lc.Close()
			ring(b, lc)
		})
		b.Run(fmt.Sprintf("sum/workers=%d", workers), func(b *testing.B) {
			data := make([][]float32, workers)
			for r := range data {
				data[r] = make([]float32, n)
				for i := range data[r] {
					data[r][i] = float32(r)
				}
			}
			out := make([]float32, n)
			b.ResetTimer()
			for b.Loop() {
				copy(out, data[0])
				for _, d := range data[1:] {
					for i, v := range d {
						out[i] += v
					}
				}
			}
			b.ReportMetric(float64(workers*4*n)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "read-GB/s")
		})
	}
	b.Run("tcp/pod-to-pod", func(b *testing.B) {
		const bytes = 64 << 20
		ctx := b.Context()
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4"})
		if err != nil {
			b.Fatal(err)
		}
		defer spg.Release(context.WithoutCancel(ctx))
		pg := spg.PlacementGroup()
		sink := tcpSinkClass.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 0))
		defer func() { _, _ = tcpSinkClose.Remote(ctx, sink, struct{}{}).Get(ctx) }()
		addr, err := tcpSinkAddr.Remote(ctx, sink, struct{}{}).Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		total := 0.0
		b.ResetTimer()
		for range b.N {
			s, err := tcpSend.Remote(ctx, c, tcpSendIn{Addr: addr, Bytes: bytes}, ray.InBundle(pg, spg.BundlesPerHost())).Get(ctx)
			if err != nil {
				b.Fatal(err)
			}
			total += s
		}
		b.ReportMetric(total/float64(b.N)*1e9, "ns/op")
		b.ReportMetric(float64(bytes)/(total/float64(b.N))/1e9, "GB/s")
	})
}

// BenchmarkE2EServeThroughPod compares, in one run on network-isolated
// pods, a request to a serve.Process replica through the router (client →
// router in this process → the server in host 0's pod) with the same
// request sent straight to that server's pod IP, 16 clients each, with the
// same client; and, as floors, through net/http/httputil's ReverseProxy
// and through a TCP relay that parses nothing, both in this process. Each
// iteration is one round of a fixed time on each path, in turn (the order
// reverses every round), so that the machine's changing load affects all
// alike. It reports the medians over the rounds of each path's requests
// per second and of its ratio to direct within a round. Its
// *-cpu-µs/req metrics are this process's CPU per request on each path:
// the client's alone (direct), or the client's plus the router's or a
// floor's, never the router's alone (subtract direct's for that); its
// *-pod-cpu-µs/req, that of the pod's server (a process of this machine,
// read from /proc).
//
//	GORAY_E2E=1 go test -tags e2e -run '^$' -bench BenchmarkE2EServeThroughPod -benchtime 10x ./
func BenchmarkE2EServeThroughPod(b *testing.B) {
	_, c := slicesCluster(b, "2x4", []string{"slice-a"}, nil)
	_, base := serveProcess(b, c, func(d *serve.Deployment) { d.MinReplicas, d.MaxConcurrentRequests = 1, 64 })
	router := base + "/proc/where"
	resp, err := http.Post(router, "application/json", strings.NewReader("{}"))
	if err != nil {
		b.Fatal(err)
	}
	var where map[string]string
	err = json.NewDecoder(resp.Body).Decode(&where)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	direct := "http://" + where["listen"] + "/where"
	podPID := where["pid"] // the harness runs pods as processes of this machine
	// The floor of any proxy in this process: net/http/httputil's
	// ReverseProxy to the same server, with nothing of the router's.
	target, err := url.Parse("http://" + where["listen"])
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	plain := &http.Server{Handler: rp}
	go plain.Serve(l)
	defer plain.Close()
	// The floor of any proxy in this process: a TCP relay that copies
	// bytes both ways between a client's connection and one of its own to
	// the server, parsing nothing.
	relay := tcpRelay(b, where["listen"])
	// The floor of a proxy on net/http's server: a handler that reads the
	// body and sends the request on a kept-alive connection of its own
	// (one write, http.ReadResponse back), with nothing else.
	minimal := minimalProxy(b, where["listen"])
	paths := []struct {
		name, url            string
		rps, ratio, cpu, pod []float64
	}{
		{name: "direct", url: direct},
		{name: "router", url: router},
		{name: "reverseproxy", url: "http://" + l.Addr().String() + "/where"},
		{name: "tcprelay", url: "http://" + relay + "/where"},
		{name: "nethttpfloor", url: "http://" + minimal + "/where"},
	}
	const clients, round = 16, 500 * time.Millisecond
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	// run returns the requests per second, this process's CPU time per
	// request (the client's, plus the router's or another proxy's), and
	// the pod's server's.
	run := func(url string) (float64, float64, float64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		start, cpu0, pod0 := time.Now(), processCPU(), pidCPU(podPID)
		for range clients {
			wg.Go(func() {
				for time.Since(start) < round {
					resp, err := client.Post(url, "application/json", strings.NewReader("{}"))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		el, cpu, pod := time.Since(start), processCPU()-cpu0, pidCPU(podPID)-pod0
		reqs := float64(max(1, n.Load()))
		return float64(n.Load()) / el.Seconds(), float64(cpu.Microseconds()) / reqs, float64(pod.Microseconds()) / reqs
	}
	for _, p := range paths {
		run(p.url) // warm them up
	}
	b.ResetTimer()
	for i := range b.N {
		order := []int{0, 1, 2, 3, 4}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		rps := make([]float64, len(paths))
		for _, j := range order {
			p := &paths[j]
			r, cpu, pod := run(p.url)
			rps[j] = r
			p.rps, p.cpu, p.pod = append(p.rps, r), append(p.cpu, cpu), append(p.pod, pod)
		}
		for j := range paths {
			paths[j].ratio = append(paths[j].ratio, rps[j]/rps[0])
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	for _, p := range paths {
		b.ReportMetric(med(p.rps), p.name+"-req/s")
		b.ReportMetric(med(p.cpu), p.name+"-cpu-µs/req")
		b.ReportMetric(med(p.pod), p.name+"-pod-cpu-µs/req")
		if p.name != "direct" {
			b.ReportMetric(med(p.ratio), p.name+"-ratio")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// tcpRelay listens on loopback and relays each connection's bytes both
// ways to a connection of its own to addr, until the benchmark ends; it
// returns its address.
func tcpRelay(b *testing.B, addr string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	b.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	// pipe copies with a buffer of its own: io.Copy between two TCP
	// connections would splice through a pipe, two system calls a chunk.
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() { pipe(s, c) })
			wg.Go(func() { pipe(c, s) })
		}
	})
	return l.Addr().String()
}

// minimalProxy serves, on loopback, a proxy to addr made of net/http's
// server and the least a client can do: the handler reads the request's
// body, writes the request (its method, path, Content-Length, body) in
// one write on an idle connection of its own (or a new one), reads the
// response with http.ReadResponse and copies its Content-Type and body.
// It is no proxy to use (no other headers, no errors but 502, no checks);
// it is the floor below any proxy on net/http's server.
func minimalProxy(b *testing.B, addr string) string {
	type conn struct {
		net.Conn
		br *bufio.Reader
		bw *bufio.Writer
	}
	idle := make(chan *conn, 256)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var c *conn
		select {
		case c = <-idle:
		default:
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			c = &conn{Conn: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}
		}
		fmt.Fprintf(c.bw, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", r.Method, r.URL.RequestURI(), addr, len(body))
		c.bw.Write(body)
		resp, err := (*http.Response)(nil), c.bw.Flush()
		if err == nil {
			resp, err = http.ReadResponse(c.br, r)
		}
		if err != nil {
			c.Close()
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header()["Content-Type"] = resp.Header["Content-Type"]
		w.Header()["Content-Length"] = resp.Header["Content-Length"]
		_, err = io.Copy(w, resp.Body)
		resp.Body.Close()
		if err != nil || resp.Close {
			c.Close()
			return
		}
		select {
		case idle <- c:
		default:
			c.Close()
		}
	})}
	go srv.Serve(l)
	b.Cleanup(func() {
		srv.Close()
		for {
			select {
			case c := <-idle:
				c.Close()
			default:
				return
			}
		}
	})
	return l.Addr().String()
}

// pidCPU is the CPU time (user and system) process pid has used so far,
// from /proc/<pid>/stat, or 0 where that cannot be read.
func pidCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: state is field 3;
	// utime and stime are fields 14 and 15, in clock ticks.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * (time.Second / clockTicks)
}

// clockTicks is the kernel's USER_HZ, /proc's unit of CPU time: 100 on
// every Linux architecture Go supports.
const clockTicks = 100
