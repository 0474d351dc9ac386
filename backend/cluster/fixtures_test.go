package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// shape is the test clusters' slice shape: v6e 2x2, one host of 4 chips.
var shape = func() tpu.SliceShape {
	s, err := tpu.NewSliceShape(tpu.V6e, "2x2", 0)
	if err != nil {
		panic(err)
	}
	return s
}()

// tpuHosts returns one host per slice s0, s1, ....
func tpuHosts(n int) []cluster.Node {
	var out []cluster.Node
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		out = append(out, cluster.Node{
			Name:      name + "-w0",
			Resources: backend.Resources{backend.CPU: 8, backend.TPU: 4},
			Labels:    tpu.HostLabels(shape, name, "pool-"+name, 0),
			TPU:       &cluster.TPUHost{Slice: name, Shape: shape, WorkerID: 0},
		})
	}
	return out
}

// shape4x4 is the sub-sliced test clusters' slice shape: v6e 4x4, four
// hosts of 4 chips; its 2x4 sub-slices are workers 0 and 2, and 1 and 3.
var shape4x4 = func() tpu.SliceShape {
	s, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		panic(err)
	}
	return s
}()

// tpuHosts4x4 returns the four hosts of each slice s0, s1, ... of
// shape4x4, named s<i>-w<worker>.
func tpuHosts4x4(n int) []cluster.Node {
	var out []cluster.Node
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		for w := range shape4x4.Hosts() {
			out = append(out, cluster.Node{
				Name:      fmt.Sprintf("%s-w%d", name, w),
				Resources: backend.Resources{backend.CPU: 8, backend.TPU: 4},
				Labels:    tpu.HostLabels(shape4x4, name, "pool-"+name, w),
				TPU:       &cluster.TPUHost{Slice: name, Shape: shape4x4, WorkerID: w},
			})
		}
	}
	return out
}

// testSource is a static NodeSource that is also a Syncer and a
// SliceClaimer whose slices other drivers may hold. It fails the test on
// a claim of a host that a granted claim holds (a claim holds the hosts
// it names: all of a slice's, or a sub-slice's), or a release of a claim
// it did not grant.
type testSource struct {
	t      testing.TB
	nodes  []cluster.Node
	synced chan struct{}

	mu       sync.Mutex
	sink     cluster.NodeSink
	held     map[string]bool // slices other drivers hold
	claimErr error           // fails every claim, when set
	onClaim  func(c cluster.Claim)
	waitCtx  bool // ClaimSlices returns only once its ctx ends
	attempts int
	granted  map[string]cluster.Claim // by claim ID, not yet released
	claimed  map[string]bool          // hosts of granted claims
	grants   int
	history  []cluster.Claim // granted claims, in order
	releases map[string]int  // by claim ID
}

func newTestSource(t testing.TB, nodes []cluster.Node) *testSource {
	return &testSource{
		t: t, nodes: nodes, synced: make(chan struct{}),
		held: map[string]bool{}, granted: map[string]cluster.Claim{}, claimed: map[string]bool{}, releases: map[string]int{},
	}
}

func (s *testSource) Run(ctx context.Context, sink cluster.NodeSink) error {
	s.mu.Lock()
	s.sink = sink
	for _, n := range s.nodes {
		sink.NodeAdded(n)
	}
	s.mu.Unlock()
	close(s.synced)
	<-ctx.Done()
	return nil
}

func (s *testSource) Synced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *testSource) Add(ctx context.Context, n cluster.Node) error {
	return backend.Errorf(backend.Unimplemented, "add node", "fixed")
}

func (s *testSource) Drain(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.NodeDraining(name)
	return nil
}

func (s *testSource) Kill(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.NodeLost(name, nil)
	return nil
}

func (s *testSource) Restore(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.Name == name {
			s.sink.NodeAdded(n)
		}
	}
	return nil
}

func (s *testSource) ClaimSlices(ctx context.Context, c cluster.Claim) error {
	s.mu.Lock()
	s.attempts++
	onClaim, waitCtx := s.onClaim, s.waitCtx
	err := s.claimErr
	var held []string
	for _, name := range c.Slices {
		if s.held[name] {
			held = append(held, name)
		}
	}
	if err == nil && len(held) > 0 {
		err = &cluster.HeldError{Slices: held, Holder: "other"}
	}
	if err == nil {
		s.granted[c.ID] = c
		s.grants++
		s.history = append(s.history, c)
		for _, hosts := range c.Hosts {
			for _, h := range hosts {
				if s.claimed[h] {
					s.t.Errorf("host %s claimed twice (claim %s of %v)", h, c.ID, c.Slices)
				}
				s.claimed[h] = true
			}
		}
	}
	s.mu.Unlock()
	if onClaim != nil {
		onClaim(c)
	}
	if waitCtx && err == nil {
		<-ctx.Done() // granted, but the caller only learns it once ctx ends
	}
	return err
}

func (s *testSource) ReleaseSlices(ctx context.Context, c cluster.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases[c.ID]++
	if _, ok := s.granted[c.ID]; !ok {
		s.t.Errorf("release of claim %s that is not granted (released %d times)", c.ID, s.releases[c.ID])
		return nil
	}
	delete(s.granted, c.ID)
	for _, hosts := range c.Hosts {
		for _, h := range hosts {
			delete(s.claimed, h)
		}
	}
	return nil
}

func (s *testSource) setHeld(name string, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[name] = held
}

// checkReleased checks that every granted claim was released exactly
// once.
func (s *testSource) checkReleased(t *testing.T, wantGrants int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants != wantGrants {
		t.Errorf("%d claims granted, want %d", s.grants, wantGrants)
	}
	if len(s.granted) != 0 {
		t.Errorf("claims never released: %v", s.granted)
	}
	for id, n := range s.releases {
		if n != 1 {
			t.Errorf("claim %s released %d times", id, n)
		}
	}
}

// testRunner runs nothing (the tests only reserve) and is a ClaimRunner.
type testRunner struct {
	mu          sync.Mutex
	reservedErr error
	onReserved  func()
	reserved    map[string]map[string]map[string]string // claim ID → host → env
	released    map[string]int
}

func newTestRunner() *testRunner {
	return &testRunner{reserved: map[string]map[string]map[string]string{}, released: map[string]int{}}
}

func (r *testRunner) Start(ctx context.Context, exec backend.Executor, lost cluster.LostFunc) (backend.Executor, error) {
	return exec, nil
}
func (r *testRunner) NodeUp(ctx context.Context, n cluster.Node) error { return nil }
func (r *testRunner) NodeDown(name string)                             {}
func (r *testRunner) Close() error                                     { return nil }

func (r *testRunner) Reserved(ctx context.Context, c cluster.Claim, env map[string]map[string]string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reservedErr != nil {
		return r.reservedErr
	}
	r.reserved[c.ID] = env
	if r.onReserved != nil {
		r.onReserved()
	}
	return nil
}

func (r *testRunner) Released(c cluster.Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released[c.ID]++
}

// checkReleased checks that every reservation the runner was told of was
// released exactly once.
func (r *testRunner) checkReleased(t *testing.T, wantReserved int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reserved) != wantReserved {
		t.Errorf("%d reservations told to the runner, want %d", len(r.reserved), wantReserved)
	}
	for id := range r.reserved {
		if r.released[id] != 1 {
			t.Errorf("reservation %s released %d times on the runner", id, r.released[id])
		}
	}
	for id := range r.released {
		if _, ok := r.reserved[id]; !ok {
			t.Errorf("runner told of the release of %s, never reserved", id)
		}
	}
}

// nopExec is an executor with nothing registered.
type nopExec struct{}

func (nopExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	return backend.Value{}, fmt.Errorf("no task %s", name)
}
func (nopExec) NewActor(ctx context.Context, class string, arg backend.Value, info *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return nil, fmt.Errorf("no actor %s", class)
}
func (nopExec) HasTask(string) bool                { return false }
func (nopExec) HasActorMethod(string, string) bool { return false }

// start builds and starts a runtime; the caller closes it.
func start(t *testing.T, src *testSource, r cluster.Runner) *cluster.Runtime {
	t.Helper()
	rt, err := cluster.New(src, r, cluster.Options{ClaimRetry: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), nopExec{}); err != nil {
		t.Fatal(err)
	}
	return rt
}

func request(name string) *backend.SliceRequest {
	return &backend.SliceRequest{Shape: shape, NumSlices: 1, Name: name}
}

func sliceNames(r *backend.SliceReservation) []string {
	var out []string
	for _, s := range r.Slices {
		out = append(out, s.Name)
	}
	return out
}
