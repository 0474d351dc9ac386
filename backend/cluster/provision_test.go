package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/internal/testkit"
)

// provSource is a node source that provisions: Provision records the
// request, and grow reports the hosts of new slices, as a cluster
// autoscaler bringing up node pools does.
type provSource struct {
	nodes []cluster.Node
	// provErr, when set, is what Provision returns.
	provErr error
	status  string

	mu       sync.Mutex
	heldBy   map[string]bool // slices another driver holds
	sink     cluster.NodeSink
	asked    []cluster.ProvisionRequest
	closed   int
	next     int
	askedNow chan struct{} // closed at the first Provision
	synced   chan struct{}
}

// Synced implements cluster.Syncer: Start waits for the first nodes.
func (s *provSource) Synced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newProvSource(nodes []cluster.Node) *provSource {
	return &provSource{nodes: nodes, status: "1 capacity pod pending: quota exceeded", askedNow: make(chan struct{}), synced: make(chan struct{})}
}

func (s *provSource) Run(ctx context.Context, sink cluster.NodeSink) error {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
	for _, n := range s.nodes {
		sink.NodeAdded(n)
	}
	close(s.synced)
	<-ctx.Done()
	return ctx.Err()
}

func (s *provSource) Add(ctx context.Context, n cluster.Node) error {
	return backend.Errorf(backend.Unimplemented, "add", "no")
}
func (s *provSource) Drain(ctx context.Context, name string) error   { return nil }
func (s *provSource) Kill(ctx context.Context, name string) error    { return nil }
func (s *provSource) Restore(ctx context.Context, name string) error { return nil }

func (s *provSource) Provision(ctx context.Context, req cluster.ProvisionRequest) (cluster.Provisioning, error) {
	if s.provErr != nil {
		return nil, s.provErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, req)
	if len(s.asked) == 1 {
		close(s.askedNow)
	}
	return (*provisioning)(s), nil
}

type provisioning provSource

// anyTask runs every task, doing nothing.
type anyTask struct{ nopExec }

func (anyTask) HasTask(string) bool { return true }
func (anyTask) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return backend.Value{}, nil
}

func (s *provSource) ClaimSlices(ctx context.Context, c cluster.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range c.Slices {
		if s.heldBy[name] {
			return &cluster.HeldError{Slices: []string{name}, Holder: "driver-b"}
		}
	}
	return nil
}

func (s *provSource) ReleaseSlices(ctx context.Context, c cluster.Claim) error { return nil }

func (p *provisioning) Status(ctx context.Context) string { return p.status }
func (p *provisioning) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed++
	return nil
}

// grow reports one new slice of the test shape, named p<k>.
func (s *provSource) grow() string {
	s.mu.Lock()
	name := fmt.Sprintf("p%d", s.next)
	s.next++
	sink := s.sink
	s.mu.Unlock()
	n := tpuHosts(1)[0]
	n.Name = name + "-w0"
	n.TPU = &cluster.TPUHost{Slice: name, Shape: shape, WorkerID: 0}
	// Worker 0 has the slice's head resource, as on GKE with Ray's
	// labelling: a name the cluster did not have before.
	n.Resources = backend.Resources{backend.CPU: 8, backend.TPU: 4, shape.HeadResource(): 1}
	sink.NodeAdded(n)
	return name
}

func (s *provSource) state() ([]cluster.ProvisionRequest, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]cluster.ProvisionRequest(nil), s.asked...), s.closed
}

func startProv(t *testing.T, src *provSource) *cluster.Runtime {
	t.Helper()
	rt, err := cluster.New(src, cluster.GoroutineRunner{}, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), anyTask{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// A cluster with no slice of the shape asks its source for one, waits,
// and is granted the new slice; the provisioning is closed once.
func TestProvisionFromZero(t *testing.T) {
	src := newProvSource(nil)
	rt := startProv(t, src)
	type result struct {
		r   *backend.SliceReservation
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := rt.ReserveSlices(context.Background(), request("fresh"))
		done <- result{r, err}
	}()
	select {
	case <-src.askedNow:
	case res := <-done:
		t.Fatalf("reservation ended before provisioning: %v", res.err)
	case <-time.After(10 * time.Second):
		t.Fatal("Provision was never called")
	}
	asked, closed := src.state()
	if len(asked) != 1 || asked[0].NumSlices != 1 || asked[0].Shape != shape || asked[0].Name != "fresh" || closed != 0 {
		t.Fatalf("asked %+v, closed %d; want one request for 1 × %s, open", asked, closed, shape)
	}
	select {
	case res := <-done:
		t.Fatalf("reservation ended with no slice: %v", res.err)
	case <-time.After(50 * time.Millisecond):
	}
	name := src.grow()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got := res.r.Slices[0].Name; got != name {
		t.Fatalf("granted slice %q, want the new %q", got, name)
	}
	if _, closed := src.state(); closed != 1 {
		t.Fatalf("provisioning closed %d times, want 1", closed)
	}
	if err := rt.RemovePlacementGroup(context.Background(), res.r.Group); err != nil {
		t.Fatal(err)
	}
}

// A reservation whose capacity never comes gives up at its deadline with
// DeadlineExceeded, says what the cluster answered, and closes the
// provisioning.
func TestProvisionTimeoutSaysWhy(t *testing.T) {
	src := newProvSource(nil)
	rt := startProv(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := rt.ReserveSlices(ctx, request("never"))
	if !errors.Is(err, context.DeadlineExceeded) || backend.CodeOf(err) != backend.DeadlineExceeded {
		t.Fatalf("err = %v (code %v), want DeadlineExceeded", err, backend.CodeOf(err))
	}
	testkit.ErrContains(t, err, "asked the cluster for 1 new slice: 1 capacity pod pending: quota exceeded")
	if _, closed := src.state(); closed != 1 {
		t.Fatalf("provisioning closed %d times, want 1", closed)
	}
}

// Only the shortfall is provisioned: with one idle slice, a request for
// two asks for one more, and is granted both.
func TestProvisionShortfall(t *testing.T) {
	src := newProvSource(tpuHosts(1))
	rt := startProv(t, src)
	req := request("two")
	req.NumSlices = 2
	done := make(chan error, 1)
	var r *backend.SliceReservation
	go func() {
		var err error
		r, err = rt.ReserveSlices(context.Background(), req)
		done <- err
	}()
	<-src.askedNow
	if asked, _ := src.state(); asked[0].NumSlices != 1 {
		t.Fatalf("asked for %d slices, want the 1 missing", asked[0].NumSlices)
	}
	src.grow()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(r.Slices) != 2 {
		t.Fatalf("granted %d slices, want 2", len(r.Slices))
	}
}

// A source that does not provision (errors.ErrUnsupported) leaves the
// request Infeasible at once, as before; any other Provision error fails
// the reservation with its code.
func TestProvisionRefused(t *testing.T) {
	src := newProvSource(nil)
	src.provErr = fmt.Errorf("provisioning off: %w", errors.ErrUnsupported)
	rt := startProv(t, src)
	_, err := rt.ReserveSlices(context.Background(), request("off"))
	if backend.CodeOf(err) != backend.Infeasible {
		t.Fatalf("err = %v, want Infeasible", err)
	}
	testkit.ErrContains(t, err, "the cluster has no TPU slices")

	src2 := newProvSource(nil)
	src2.provErr = backend.Errorf(backend.InvalidArgument, "provision", "v6e has no 3x3 topology")
	rt2 := startProv(t, src2)
	_, err = rt2.ReserveSlices(context.Background(), request("bad"))
	if backend.CodeOf(err) != backend.InvalidArgument {
		t.Fatalf("err = %v, want InvalidArgument", err)
	}
	testkit.ErrContains(t, err, "v6e has no 3x3 topology")
}

// A slice that looked idle but another driver holds (its claim is refused
// as held) makes the request short: the runtime asks for a new one.
func TestProvisionWhenHeldElsewhere(t *testing.T) {
	src := newProvSource(tpuHosts(1))
	src.heldBy = map[string]bool{"s0": true}
	rt := startProv(t, src)
	done := make(chan error, 1)
	var r *backend.SliceReservation
	go func() {
		var err error
		r, err = rt.ReserveSlices(context.Background(), request("race"))
		done <- err
	}()
	select {
	case <-src.askedNow:
	case err := <-done:
		t.Fatalf("reservation ended before provisioning: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Provision was never called after the claim was refused as held")
	}
	name := src.grow()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := r.Slices[0].Name; got != name {
		t.Fatalf("granted %q, want the new slice %q", got, name)
	}
	if asked, closed := src.state(); len(asked) != 1 || asked[0].NumSlices != 1 || closed != 1 {
		t.Fatalf("asked %+v, closed %d; want one request for 1 slice, closed once", asked, closed)
	}
}

// A slice that arrives while its request waits brings resource names the
// cluster did not have (its head resource): a task placed in the granted
// group's bundle, whose demand vector is as long as the names are now,
// must fit the bundle. Its vectors were built when the request was queued and were too
// short: the submit panicked with an index out of range.
func TestProvisionedBundleTakesTasks(t *testing.T) {
	src := newProvSource(nil)
	rt := startProv(t, src)
	done := make(chan error, 1)
	var r *backend.SliceReservation
	go func() {
		var err error
		r, err = rt.ReserveSlices(context.Background(), request("late"))
		done <- err
	}()
	<-src.askedNow
	src.grow()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	id, err := rt.SubmitTask(context.Background(), &backend.TaskSpec{Name: "t", Scheduling: backend.Scheduling{
		Resources: backend.Resources{backend.TPU: 4},
		Placement: backend.Placement{Group: r.Group, Bundle: 0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Get(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// failingProvisioning is a provisioning whose request fails for good when
// the test sends on failed (cluster.ProvisioningFailer).
type failingProvisioning struct {
	*provisioning
	failed chan error
}

func (p failingProvisioning) Failed() <-chan error { return p.failed }

type failingSource struct {
	*provSource
	failed chan error
}

func (s failingSource) Provision(ctx context.Context, req cluster.ProvisionRequest) (cluster.Provisioning, error) {
	p, err := s.provSource.Provision(ctx, req)
	if err != nil {
		return nil, err
	}
	return failingProvisioning{p.(*provisioning), s.failed}, nil
}

// A provisioning that fails for good (a ProvisioningRequest marked Failed,
// or rejected by Kueue's admission check) fails the waiting reservation at
// once with its error and code, not at the reservation's deadline; the
// provisioning is closed once.
func TestProvisionFailureEndsTheWait(t *testing.T) {
	is := is.New(t)
	src := failingSource{newProvSource(nil), make(chan error, 1)}
	rt, err := cluster.New(src, cluster.GoroutineRunner{}, cluster.Options{})
	is.NoErr(err)
	is.NoErr(rt.Start(context.Background(), anyTask{}))
	t.Cleanup(func() { rt.Close() })
	done := make(chan error, 1)
	go func() {
		_, err := rt.ReserveSlices(context.Background(), request("doomed"))
		done <- err
	}()
	select {
	case <-src.askedNow:
	case err := <-done:
		t.Fatalf("reservation ended before provisioning: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Provision was never called")
	}
	src.failed <- backend.Errorf(backend.ResourceExhausted, "provision", "ProvisioningRequest pr-1: Failed=True (OutOfStock: no TPU v6e in the zone)")
	select {
	case err := <-done:
		is.Equal(backend.CodeOf(err), backend.ResourceExhausted) // the provisioning's code
		testkit.ErrContains(t, err, "OutOfStock: no TPU v6e in the zone")
		testkit.ErrContains(t, err, "reserve")
	case <-time.After(30 * time.Second):
		t.Fatal("the reservation still waits after its provisioning failed")
	}
	_, closed := src.state()
	is.Equal(closed, 1) // the provisioning is closed once
}
