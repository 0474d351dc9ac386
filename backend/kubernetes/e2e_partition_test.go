//go:build e2e

package kubernetes

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// spinTask runs until its context ends (at most a minute).
var spinTask = ray.NewTask("k8stest.spin", func(ctx context.Context, _ struct{}) (struct{}, error) {
	select {
	case <-ctx.Done():
		return struct{}{}, ctx.Err()
	case <-time.After(time.Minute):
		return struct{}{}, nil
	}
})

// apiProxy forwards TCP connections to the API server until cut, after
// which it refuses new ones and has closed the open ones: a partition
// between one driver and the API server (its worker pods, which it dials
// directly, stay reachable).
type apiProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newAPIProxy(t *testing.T, target string) *apiProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{l: l, target: target}
	t.Cleanup(func() {
		p.partition()
		l.Close() // ends the accept loop
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// partition closes every connection and refuses new ones.
func (p *apiProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestE2EPartitionedDriverIsFenced: a driver cut off from the API server
// (its connections to the workers intact) while work runs on its slice
// keeps running it until another driver, which reaches the API server, takes
// the slice over after the Lease expired: the takeover deletes the cut-off
// driver's pods, and its work fails with an error saying the Lease was lost.
// The other driver then runs on the slice.
func TestE2EPartitionedDriverIsFenced(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	rc := driverConfig(t, cp)
	const lease = 6 * time.Second

	driver := func(identity string, rc *rest.Config) *ray.Cluster {
		client, err := k8s.NewForConfig(rc)
		is.NoErr(err)
		cfg := testConfig()
		cfg.Identity, cfg.Client, cfg.Worker.Image = identity, client, workerImage
		cfg.Lease = LeaseConfig{Duration: lease}
		be, err := New(ctx, cfg)
		is.NoErr(err)
		c, err := ray.NewCluster(ctx, be, nil)
		is.NoErr(err)
		return c
	}

	// Driver a reaches the API server through the proxy.
	u, err := url.Parse(rc.Host)
	is.NoErr(err)
	proxy := newAPIProxy(t, u.Host)
	arc := rest.CopyConfig(rc)
	arc.Host = "https://" + proxy.l.Addr().String()
	arc.Timeout = 2 * time.Second
	a := driver("driver-a", arc)
	spec := ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4}
	spg, err := ray.NewSlicePlacementGroup(ctx, a, spec)
	is.NoErr(err)
	work := make(chan error, 1)
	go func() { _, err := ray.RunOnSlice(ctx, spg, spinTask, struct{}{}); work <- err }()

	// Driver b, with a direct connection, waits for the slice.
	b := driver("driver-b", rc)
	defer b.Close()
	bspec := spec
	bspec.Timeout = lease + time.Minute
	granted := make(chan error, 1)
	var bspg *ray.SlicePlacementGroup
	go func() {
		var err error
		bspg, err = ray.NewSlicePlacementGroup(ctx, b, bspec)
		granted <- err
	}()

	proxy.partition()
	cut := time.Now()
	var failed time.Duration
	select {
	case err := <-work:
		failed = time.Since(cut)
		if err == nil || !strings.Contains(err.Error(), "lost the Lease") {
			t.Fatalf("driver a's work ended %v after the partition with %v; want an error saying the Lease was lost", failed, err)
		}
		t.Logf("driver a's work failed %v after the partition: %v", failed.Round(100*time.Millisecond), err)
	case <-time.After(lease + 40*time.Second):
		t.Fatal("the partitioned driver's work neither ended nor was handed over")
	}
	is.True(failed >= lease-time.Second) // it ran on until its Lease could be taken over
	select {
	case err := <-granted:
		is.NoErr(err)
	case <-time.After(time.Minute):
		t.Fatal("driver b did not get the slice")
	}
	t.Logf("driver b got the slice %v after the partition (Lease %v)", time.Since(cut).Round(100*time.Millisecond), lease)
	_, err = ray.RunOnSlice(ctx, bspg, envPairTask, struct{}{})
	is.NoErr(err)
	is.NoErr(bspg.Release(ctx))

	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = spg.Release(closeCtx) // a cannot reach the API server: best effort
	_ = a.Close()
}
