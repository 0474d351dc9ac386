package ray_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

var sliceWorker = ray.NewTask("slicetest.worker", func(ctx context.Context, _ struct{}) (map[string]string, error) {
	rc, _ := ray.Runtime(ctx)
	env := rc.Environ()
	env["HOST"] = rc.NodeName()
	return env, nil
})

// holds lets tests park tasks on TPU hosts: sliceHold reports on started
// and blocks until its release channel closes or its context ends.
var holds sync.Map // name -> *hold

type hold struct {
	started chan struct{}
	release chan struct{}
}

func newHold(name string) *hold {
	h := &hold{started: make(chan struct{}), release: make(chan struct{})}
	holds.Store(name, h)
	return h
}

var sliceHold = ray.NewTask("slicetest.hold", func(ctx context.Context, name string) (string, error) {
	v, ok := holds.Load(name)
	if !ok {
		return "", fmt.Errorf("no hold %q", name)
	}
	h := v.(*hold)
	close(h.started)
	select {
	case <-h.release:
		return "released", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
})

func tpuCluster(t *testing.T, slices ...local.TPUSliceSpec) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 8}}},
		TPUSlices: slices,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func v6e(count int) local.TPUSliceSpec {
	return local.TPUSliceSpec{Generation: "v6e", Topology: "4x4", Count: count}
}

var spec4x4 = ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// assertAllFree checks that no slice is reserved or busy and every node is
// back to full capacity.
func assertAllFree(t *testing.T, c *ray.Cluster) {
	t.Helper()
	is := is.New(t)
	ctx := context.Background()
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		if st.ReservedBy != 0 || !st.Idle {
			t.Fatalf("slice %s still held: %+v", st.Name, st)
		}
	}
	snap, err := c.Snapshot(ctx)
	is.NoErr(err)
	for _, n := range snap.Nodes {
		if n.Free.String() != n.Capacity.String() {
			t.Fatalf("node %s: free %s, capacity %s", n.Name, n.Free, n.Capacity)
		}
	}
	is.Equal(len(snap.PlacementGroups), 0)
}

func TestSliceReservation(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(2))
	ctx := within(t, 10*time.Second)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	is.Equal(spg.NumSlices(), 1)
	is.Equal(spg.NumHosts(), 4)
	is.Equal(spg.ChipsPerHost(), 4)
	is.Equal(spg.NumBundles(), 4)
	is.Equal(spg.Topology(), "4x4")
	is.Equal(spg.AcceleratorVersion(), "v6e")
	is.Equal(spg.BundleResources(), ray.Resources{ray.CPU: 1, ray.TPU: 4})
	hosts := spg.Hosts()
	is.Equal(len(hosts), 4)
	envs, err := ray.RunOnSlice(ctx, spg, sliceWorker, struct{}{})
	is.NoErr(err)
	for i, env := range envs {
		is.Equal(env["HOST"], hosts[i])                 // results in worker-ID order
		is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i)) // worker ID from the reservation
		is.Equal(env[tpu.EnvWorkerHostnames], strings.Join(hosts, ","))
		is.Equal(env[tpu.EnvName], spg.SliceNames()[0])
		is.Equal(env[tpu.EnvTopology], "4x4")
		is.Equal(env[tpu.EnvAcceleratorType], "v6e-16")
		is.Equal(env[tpu.EnvHostBounds], "2,2,1")
		is.Equal(env[tpu.EnvChipsPerHostBounds], "2,2,1")
		is.Equal(env[tpu.EnvMegascaleNumSlices], "") // single slice: no multislice env
		is.Equal(spg.WorkerEnv(i)[tpu.EnvWorkerID], strconv.Itoa(i))
	}
	// Every host of the slice is labelled as GKE and the webhook would.
	snap, err := c.Snapshot(ctx)
	is.NoErr(err)
	for _, n := range snap.Nodes {
		if n.Name == hosts[1] {
			is.Equal(n.Labels[tpu.LabelGKEAccelerator], "tpu-v6e-slice")
			is.Equal(n.Labels[tpu.LabelGKETopology], "4x4")
			is.Equal(n.Labels[tpu.LabelGKENodePool], spg.SliceNames()[0])
			is.Equal(n.Labels[tpu.LabelWorkerID], "1")
			is.Equal(n.Labels[tpu.LabelPodType], "v6e-16")
			is.Equal(n.Capacity[ray.TPU], 4.0)
		}
	}
	sums := ray.SummarizeSlices(must(ray.TPUSlices(ctx, c)))
	is.Equal(sums, []ray.SliceSummary{{Generation: "v6e", Topology: "4x4", ChipsPerHost: 4, Total: 2, Intact: 2, Free: 1, Reserved: 1}})
	is.NoErr(spg.Release(ctx))
	is.NoErr(spg.Release(ctx)) // idempotent
	assertAllFree(t, c)
}

func TestSliceBundles(t *testing.T) {
	c := tpuCluster(t, v6e(1), local.TPUSliceSpec{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	t.Run("PerChip", func(t *testing.T) {
		is := is.New(t)
		ctx := within(t, 5*time.Second)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "TPU-V6E", ResourcesPerBundle: ray.Resources{ray.TPU: 1}})
		is.NoErr(err)
		defer spg.Release(ctx)
		is.Equal(spg.NumBundles(), 16)
		is.Equal(spg.BundlesPerHost(), 4)
		is.Equal(spg.BundleResources(), ray.Resources{ray.CPU: 1, ray.TPU: 1})
	})
	t.Run("Indivisible", func(t *testing.T) {
		is := is.New(t)
		_, err := ray.NewSlicePlacementGroup(within(t, time.Second), c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", ResourcesPerBundle: ray.Resources{ray.TPU: 3}})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "divide"))
	})
	t.Run("ChipsPerVM", func(t *testing.T) {
		is := is.New(t)
		ctx := within(t, 5*time.Second)
		// v6e 2x4 is one 8-chip VM by default, which this cluster lacks;
		// with ChipsPerVM 4 it is two 4-chip hosts.
		_, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e"})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e", ChipsPerVM: 4})
		is.NoErr(err)
		defer spg.Release(ctx)
		is.Equal(spg.NumHosts(), 2)
		is.Equal(spg.WorkerEnv(1)[tpu.EnvHostBounds], "1,2,1")
	})
}

func TestSliceErrors(t *testing.T) {
	c := tpuCluster(t, v6e(1), local.TPUSliceSpec{Generation: "v5p", Topology: "2x2x2"},
		local.TPUSliceSpec{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	for _, tc := range []struct {
		name string
		spec ray.SliceSpec
		code ray.ErrorCode
		msg  string
	}{
		{"InvalidTopology", ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"}, ray.InvalidArgument, "valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"},
		{"UnknownGeneration", ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v9z"}, ray.InvalidArgument, "v9z"},
		{"NoSuchShape", ray.SliceSpec{Topology: "8x8", AcceleratorVersion: "v6e"}, ray.Infeasible, "1 × v6e 4x4, 1 × v5p 2x2x2"},
		// v6e 2x4 is one 8-chip host by default; the cluster's are two hosts of 4.
		{"OtherChipsPerHost", ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e"}, ray.Infeasible,
			"want 1 × v6e 2x4 with 8 chips per host (1 host), but the cluster's v6e 2x4 slices have 4 chips per host (2 hosts): ask for ChipsPerVM 4"},
		{"TooMany", ray.SliceSpec{Topology: "2x2x2", AcceleratorVersion: "v5p", NumSlices: 2}, ray.Infeasible, "only 1"},
		{"NegativeSlices", ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: -1}, ray.InvalidArgument, "negative"},
		{"NegativeResources", ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", ResourcesPerBundle: ray.Resources{ray.CPU: -1}}, ray.InvalidArgument, "CPU"},
		{"TooMuchCPU", ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", ResourcesPerBundle: ray.Resources{ray.CPU: 64}}, ray.Infeasible, "do not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			start := time.Now()
			_, err := ray.NewSlicePlacementGroup(within(t, 10*time.Second), c, tc.spec)
			is.Equal(ray.CodeOf(err), tc.code)
			is.True(strings.Contains(err.Error(), tc.msg))
			is.True(time.Since(start) < 5*time.Second) // failed at once, not after a wait
		})
	}
	t.Run("ClosedCluster", func(t *testing.T) {
		is := is.New(t)
		c := tpuCluster(t, v6e(1))
		is.NoErr(c.Close())
		_, err := ray.NewSlicePlacementGroup(context.Background(), c, spec4x4)
		is.True(errors.Is(err, ray.ErrClosed))
	})
	t.Run("NoSliceBackend", func(t *testing.T) {
		is := is.New(t)
		// Embedding the interface hides the fake's SliceReserver.
		nc, err := ray.NewCluster(context.Background(), struct{ backend.Backend }{fake.New(nil)}, nil)
		is.NoErr(err)
		defer nc.Close()
		_, err = ray.NewSlicePlacementGroup(context.Background(), nc, spec4x4)
		is.Equal(ray.CodeOf(err), ray.Unimplemented)
		_, err = ray.TPUSlices(context.Background(), nc)
		is.Equal(ray.CodeOf(err), ray.Unimplemented)
	})
	assertAllFree(t, c)
}

// TestSliceBusyWaitsThenTimesOut: shapes exist but are busy, so the request
// waits and fails with DeadlineExceeded, holding nothing; once freed, a new
// request gets the slice.
func TestSliceBusyWaitsThenTimesOut(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 10*time.Second)
	held, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	_, err = ray.NewSlicePlacementGroup(within(t, 30*time.Millisecond), c, spec4x4)
	is.True(errors.Is(err, context.DeadlineExceeded))
	is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
	// The error says what was asked and how the slices of that shape stand.
	is.True(strings.Contains(err.Error(), "reserve TPU slices: gave up after "))
	is.True(strings.Contains(err.Error(), "waiting for 1 × v6e 4x4: of the cluster's 1 slices of that shape 0 free, 1 busy, 0 broken: context deadline exceeded"))
	spec := spec4x4
	spec.Timeout = 20 * time.Millisecond
	_, err = ray.NewSlicePlacementGroup(ctx, c, spec)
	is.True(errors.Is(err, context.DeadlineExceeded))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ray.NewSlicePlacementGroup(cctx, c, spec4x4)
	is.Equal(err, context.Canceled)
	is.NoErr(held.Release(ctx))
	again, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	is.NoErr(again.Release(ctx))
	assertAllFree(t, c)
}

// TestSliceWaiterGrantedOnRelease: a waiting request is granted as soon as a
// slice is released.
func TestSliceWaiterGrantedOnRelease(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 10*time.Second)
	held, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	got := make(chan error, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
		if err == nil {
			err = spg.Release(ctx)
		}
		got <- err
	}()
	is.NoErr(held.Release(ctx))
	is.NoErr(<-got)
	assertAllFree(t, c)
}

// TestSliceFragmentation: every slice has free hosts, but none is wholly
// free, so a reservation waits and times out without taking any host.
func TestSliceFragmentation(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(3))
	ctx := within(t, 10*time.Second)
	var hs []*hold
	var refs []ray.ObjectRef[string]
	for i := range 3 {
		// One chip on worker i of slice i: 15 of 16 chips stay free.
		name := fmt.Sprintf("%s-%d", t.Name(), i)
		hs = append(hs, newHold(name))
		refs = append(refs, sliceHold.Remote(ctx, c, name, ray.Resources{ray.TPU: 1, ray.CPU: 0},
			ray.NodeSelector{tpu.LabelSliceName: fmt.Sprintf("v6e-16-%d", i), tpu.LabelWorkerID: strconv.Itoa(i)}))
	}
	for _, h := range hs {
		<-h.started
	}
	_, err := ray.NewSlicePlacementGroup(within(t, 50*time.Millisecond), c, spec4x4)
	is.True(errors.Is(err, context.DeadlineExceeded))
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		is.Equal(st.ReservedBy, backend.PlacementGroupID(0)) // no partial reservation
		is.True(!st.Idle)
	}
	is.Equal(ray.SummarizeSlices(states)[0].Free, 0)
	// Free slice 1: a waiting reservation gets exactly that one.
	got := make(chan *ray.SlicePlacementGroup, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
		if err != nil {
			t.Error(err)
		}
		got <- spg
	}()
	waitQueued(t, c)
	close(hs[1].release)
	spg := <-got
	is.Equal(spg.SliceNames(), []string{"v6e-16-1"})
	is.NoErr(spg.Release(ctx))
	close(hs[0].release)
	close(hs[2].release)
	_, err = ray.GetAll(ctx, refs)
	is.NoErr(err)
	assertAllFree(t, c)
}

// TestSliceContention: 64 goroutines race for 8 slices over many rounds.
// No slice ever has two holders, reservations are never partial, and
// everything is released at the end.
func TestSliceContention(t *testing.T) {
	c := tpuCluster(t, v6e(8))
	ctx := within(t, 60*time.Second)
	var (
		mu      sync.Mutex
		holder  = map[string]int{}
		granted int
	)
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				n := 1 + r.IntN(2) // single and multislice requests
				spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: n})
				if err != nil {
					errs <- err
					return
				}
				names := spg.SliceNames()
				if len(names) != n || spg.NumHosts() != 4*n {
					errs <- fmt.Errorf("partial reservation: %v, %d hosts", names, spg.NumHosts())
				}
				mu.Lock()
				for _, s := range names {
					if h, ok := holder[s]; ok {
						errs <- fmt.Errorf("slice %s held by %d and %d", s, h, g)
					}
					holder[s] = g
				}
				granted++
				mu.Unlock()
				if r.IntN(4) == 0 {
					// Run on it now and then: worker IDs must match hosts.
					envs, err := ray.RunOnSlice(ctx, spg, sliceWorker, struct{}{})
					if err != nil {
						errs <- err
					}
					for i, env := range envs {
						if env["HOST"] != spg.Hosts()[i] || env[tpu.EnvWorkerID] != strconv.Itoa(i%4) {
							errs <- fmt.Errorf("host %d: env %v", i, env)
						}
					}
				}
				mu.Lock()
				for _, s := range names {
					delete(holder, s)
				}
				mu.Unlock()
				if err := spg.Release(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if granted != 64*rounds {
		t.Errorf("granted %d reservations, want %d", granted, 64*rounds)
	}
	assertAllFree(t, c)
}

// TestMultisliceAllOrNothing: with one of three slices held, a request for
// two waits without taking the free one, and is granted both once another
// is released.
func TestMultisliceAllOrNothing(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(3))
	ctx := within(t, 10*time.Second)
	a, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	b, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	two := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2}
	_, err = ray.NewSlicePlacementGroup(within(t, 30*time.Millisecond), c, two)
	is.True(errors.Is(err, context.DeadlineExceeded))
	sums := ray.SummarizeSlices(must(ray.TPUSlices(ctx, c)))
	is.Equal(sums[0].Reserved, 2) // the free slice was not taken
	is.Equal(sums[0].Free, 1)
	// A multislice request at the head of the queue is not overtaken by a
	// single-slice request that arrives later.
	multi := make(chan *ray.SlicePlacementGroup, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(ctx, c, two)
		if err != nil {
			t.Error(err)
		}
		multi <- spg
	}()
	waitQueued(t, c)
	single := make(chan error, 1)
	go func() {
		spg, err := ray.NewSlicePlacementGroup(within(t, 50*time.Millisecond), c, spec4x4)
		if err == nil {
			spg.Release(ctx)
		}
		single <- err
	}()
	is.True(errors.Is(<-single, context.DeadlineExceeded))
	is.NoErr(a.Release(ctx))
	m := <-multi
	is.Equal(m.NumSlices(), 2)
	envs, err := ray.RunOnSlice(ctx, m, sliceWorker, struct{}{})
	is.NoErr(err)
	for i, env := range envs {
		is.Equal(env[tpu.EnvMegascaleNumSlices], "2")
		is.Equal(env[tpu.EnvMegascaleSliceID], strconv.Itoa(i/4))
		is.Equal(env[tpu.EnvMegascaleCoordinatorAddress], m.Hosts()[0])
		is.Equal(env[tpu.EnvMegascalePort], "8081")
	}
	is.NoErr(m.Release(ctx))
	is.NoErr(b.Release(ctx))
	assertAllFree(t, c)
}

// waitQueued waits until the backend has a queued slice request; a
// reservation that is waiting shows as busy in no other way, so poll the
// summary briefly.
func waitQueued(t *testing.T, c *ray.Cluster) {
	t.Helper()
	be := c.Backend().(*local.Backend)
	deadline := time.Now().Add(5 * time.Second)
	for be.QueuedSliceRequests() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("slice request never queued")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSliceHostDeath: a host of a reserved slice dies; work on it fails
// with Unavailable, the slice is no longer intact, and it is never handed
// out until the host is back.
func TestSliceHostDeath(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(2))
	ctx := within(t, 10*time.Second)
	fi := c.Backend().(backend.FaultInjector)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	hosts := spg.Hosts()
	h := newHold(t.Name())
	running := sliceHold.Remote(ctx, c, t.Name(), ray.InBundle(spg.PlacementGroup(), 2), ray.Resources{ray.CPU: 0}, ray.Retries(0))
	<-h.started
	is.NoErr(fi.KillNode(ctx, hosts[2]))
	_, err = running.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Unavailable)
	t.Log(err)
	is.True(strings.Contains(err.Error(), "was lost (node "+hosts[2]+" was killed)")) // and why: the cause the backend gave
	sums := ray.SummarizeSlices(must(ray.TPUSlices(ctx, c)))
	is.Equal(sums[0].Intact, 1)
	is.NoErr(spg.Release(ctx))
	// Two slices exist but one is broken: a request for two waits.
	_, err = ray.NewSlicePlacementGroup(within(t, 30*time.Millisecond), c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2})
	is.True(errors.Is(err, context.DeadlineExceeded))
	// A single slice comes from the intact one.
	other, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	is.True(other.SliceNames()[0] != spg.SliceNames()[0])
	is.NoErr(other.Release(ctx))
	is.NoErr(fi.RestartNode(ctx, hosts[2]))
	both, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2})
	is.NoErr(err)
	is.NoErr(both.Release(ctx))
	assertAllFree(t, c)
}

func TestDispatch(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 10*time.Second)
	envs, err := ray.Dispatch(ctx, c, spec4x4, sliceWorker, struct{}{})
	is.NoErr(err)
	is.Equal(len(envs), 4)
	for i, env := range envs {
		is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i))
	}
	assertAllFree(t, c) // released after the run
	_, err = ray.Dispatch(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2}, sliceWorker, struct{}{})
	is.Equal(ray.CodeOf(err), ray.Infeasible)
}

func TestFormatSlices(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(2))
	ctx := within(t, 10*time.Second)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "train"})
	is.NoErr(err)
	defer spg.Release(ctx)
	is.NoErr(c.Backend().(backend.FaultInjector).KillNode(ctx, "v6e-16-1-w3"))
	got := ray.FormatSlices(must(ray.TPUSlices(ctx, c)))
	want := `v6e-16-0 (v6e 4x4, 4 hosts): A = train
  A0 A0 A1 A1
  A0 A0 A1 A1
  A2 A2 A3 A3
  A2 A2 A3 A3
v6e-16-1 (v6e 4x4, 4 hosts): free, not intact
  .0 .0 .1 .1
  .0 .0 .1 .1
  .2 .2 x3 x3
  .2 .2 x3 x3
`
	is.Equal(got, want)
}

// TestSlicePreempted: a preempted slice fails the work on it with
// Unavailable (after retries) and reports no intact hosts.
func TestSlicePreempted(t *testing.T) {
	is := is.New(t)
	c := tpuCluster(t, v6e(1))
	ctx := within(t, 10*time.Second)
	be := c.Backend().(*local.Backend)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec4x4)
	is.NoErr(err)
	defer spg.Release(ctx)
	h := newHold(t.Name())
	ref := sliceHold.Remote(ctx, c, t.Name(), ray.InBundle(spg.PlacementGroup(), 0), ray.Resources{ray.CPU: 0}, ray.Retries(0))
	<-h.started
	is.NoErr(be.PreemptSlice(ctx, spg.SliceNames()[0]))
	_, err = ref.Get(ctx)
	is.Equal(ray.CodeOf(err), ray.Unavailable)
	states := must(ray.TPUSlices(ctx, c))
	is.True(!states[0].Intact)
	for _, hs := range states[0].Hosts {
		is.True(!hs.Alive)
	}
	is.Equal(ray.CodeOf(be.PreemptSlice(ctx, "nope")), ray.NotFound)
}

// TestSliceCancelRaces: reservations whose contexts end at random moments,
// some while being granted, never leave anything held.
func TestSliceCancelRaces(t *testing.T) {
	c := tpuCluster(t, v6e(2))
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(300))*time.Microsecond)
				spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 1 + r.IntN(2)})
				cancel()
				if err == nil {
					if err := spg.Release(context.Background()); err != nil {
						t.Error(err)
					}
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("want a reservation or DeadlineExceeded, have %v", err)
				}
			}
		})
	}
	wg.Wait()
	assertAllFree(t, c)
	if n := c.Backend().(*local.Backend).QueuedSliceRequests(); n != 0 {
		t.Errorf("%d requests still queued", n)
	}
}
