package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// tpuEnv returns the env of the TPU worker it runs on, plus its node.
var tpuEnv = ray.NewTask("backendtest.tpuEnv", func(ctx context.Context, _ struct{}) (map[string]string, error) {
	rc, _ := ray.Runtime(ctx)
	env := rc.Environ()
	if env == nil {
		env = map[string]string{}
	}
	env["NODE"] = rc.NodeName()
	return env, nil
})

// DefaultTPUNodes is the cluster of the TPU slice tests: one CPU node and
// two v6e 4x4 slices ("slice-a", "slice-b"), each four hosts of four chips
// labelled as GKE and the TPU webhook label them (tpu.HostLabels).
func DefaultTPUNodes() []Node {
	nodes := []Node{{Name: "cpu-0", Resources: backend.Resources{backend.CPU: 8}}}
	shape, err := tpu.NewSliceShape(tpu.V6e, "4x4", 0)
	if err != nil {
		panic(err)
	}
	return append(nodes, tpuHostNodes(shape, "%s-%d", "slice-a", "slice-b")...)
}

// tpuHostNodes returns a node per host of a slice of shape for every
// slice name, labelled as GKE labels TPU hosts (the slice is its own node
// pool); nameFormat names host w of slice s (fmt, s then w).
func tpuHostNodes(shape tpu.SliceShape, nameFormat string, names ...string) []Node {
	var nodes []Node
	for _, slice := range names {
		for w := range shape.Hosts() {
			nodes = append(nodes, Node{
				Name:      fmt.Sprintf(nameFormat, slice, w),
				Resources: backend.Resources{backend.CPU: 8, backend.TPU: float64(shape.ChipsPerHost)},
				Labels:    tpu.HostLabels(shape, slice, slice, w),
			})
		}
	}
	return nodes
}

func (s *suite) testSlices(t *testing.T) {
	finite := s.h.Capabilities.TPUSlices
	s.need(t, finite || s.h.Capabilities.SliceReservations, "SliceReservations")
	one := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"}
	two := ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2}
	allFree := func(t *testing.T, c *ray.Cluster) {
		t.Helper()
		states, err := ray.TPUSlices(context.Background(), c)
		if err != nil {
			t.Fatalf("TPUSlices: %v", err)
		}
		if len(states) != 2 {
			t.Fatalf("want 2 slices, have %d: %+v", len(states), states)
		}
		for _, st := range states {
			if st.ReservedBy != 0 {
				t.Fatalf("slice %s still reserved", st.Name)
			}
		}
	}
	t.Run("ReserveAndRun", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		is.Equal(spg.NumHosts(), 4)
		is.Equal(spg.ChipsPerHost(), 4)
		envs, err := ray.RunOnSlice(ctx, spg, tpuEnv, struct{}{})
		is.NoErr(err)
		hosts := spg.Hosts()
		slice := spg.SliceNames()[0]
		for i, env := range envs {
			if finite { // the slices are the cluster's nodes
				is.Equal(env["NODE"], hosts[i])
			}
			is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i))
			is.Equal(env[tpu.EnvName], slice)
			is.Equal(len(strings.Split(env[tpu.EnvWorkerHostnames], ",")), 4)
			is.Equal(env[tpu.EnvTopology], "4x4")
		}
		is.NoErr(spg.Release(ctx))
		is.NoErr(spg.Release(ctx))
		if finite {
			allFree(t, c)
		}
	})
	t.Run("Multislice", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, two)
		is.NoErr(err)
		defer spg.Release(ctx)
		is.Equal(spg.NumSlices(), 2)
		envs, err := ray.RunOnSlice(ctx, spg, tpuEnv, struct{}{})
		is.NoErr(err)
		is.Equal(len(envs), 8)
		for i, env := range envs {
			is.Equal(env[tpu.EnvMegascaleNumSlices], "2")
			is.Equal(env[tpu.EnvMegascaleSliceID], strconv.Itoa(i/4))
			is.Equal(env[tpu.EnvMegascaleCoordinatorAddress], envs[0][tpu.EnvMegascaleCoordinatorAddress])
			is.Equal(env[tpu.EnvWorkerID], strconv.Itoa(i%4))
		}
	})
	t.Run("NamedSliceResources", func(t *testing.T) {
		// Ray gives every host of a slice the resource <TPU_NAME>: 1 and
		// worker 0 also TPU-<pod type>-head: 1, so work can target one
		// named slice, or its first host, without a reservation.
		s.need(t, finite, "TPUSlices")
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		is.True(len(states) > 0)
		for _, st := range states {
			hosts := make([]string, len(st.Hosts))
			for i, h := range st.Hosts {
				hosts[i] = h.Node
			}
			for range 4 {
				env, err := tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{st.Name: 1}).Get(ctx)
				is.NoErr(err)
				is.True(slices.Contains(hosts, env["NODE"])) // a host of the named slice
			}
			shape, err := tpu.NewSliceShape(tpu.Generation(st.Generation), st.Topology, st.ChipsPerHost)
			is.NoErr(err)
			env, err := tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{shape.HeadResource(): 1, st.Name: 1}).Get(ctx)
			is.NoErr(err)
			is.Equal(env["NODE"], hosts[0]) // the head resource is worker 0's
		}
		_, err = tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{states[0].Name: 2}).Get(ctx)
		is.Equal(ray.CodeOf(err), ray.Infeasible) // one unit per host
		allFree(t, c)
	})
	t.Run("SubHostChips", func(t *testing.T) {
		// Work holding a whole number of a host's chips, fewer than all,
		// owns particular chips and gets Ray's TPU_VISIBLE_CHIPS (and, for
		// 1 or 2 chips, the bounds), as Ray's TPU accelerator manager sets
		// them for an actor with {"TPU": 1}: four actors on a 4-chip host
		// see one chip each, never the same one.
		s.need(t, finite, "TPUSlices")
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		if !s.h.Capabilities.ChipsOutsideReservations {
			// The backend's workers outside reservations hold no chips:
			// TPU work there is refused, saying to reserve a slice.
			_, err := tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{ray.TPU: 1}).Get(ctx)
			is.Equal(ray.CodeOf(err), ray.Infeasible)
			is.True(strings.Contains(err.Error(), "outside a slice reservation"))
			err = counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 2}).Ready(ctx)
			is.Equal(ray.CodeOf(err), ray.Infeasible)
			return
		}
		host := func(w int) ray.NodeSelector {
			return ray.NodeSelector{tpu.LabelSliceName: "slice-a", tpu.LabelWorkerID: strconv.Itoa(w)}
		}
		env := func(h *ray.ActorHandle[*counter], key string) where {
			t.Helper()
			w, err := counterWhere.Remote(ctx, h, key).Get(ctx)
			is.NoErr(err)
			return w
		}
		var ones []*ray.ActorHandle[*counter]
		seen := map[string]bool{}
		for range 4 {
			h := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 1}, host(0))
			ones = append(ones, h)
			w := env(h, tpu.EnvVisibleChips)
			is.Equal(w.Node, "slice-a-0")
			is.True(!seen[w.Env]) // a chip of its own
			seen[w.Env] = true
			is.Equal(env(h, tpu.EnvChipsPerHostBounds).Env, "1,1,1")
			is.Equal(env(h, tpu.EnvHostBounds).Env, "1,1,1")
		}
		is.Equal(seen, map[string]bool{"0": true, "1": true, "2": true, "3": true})

		// The host is full: a fifth waits, and takes the chip a killed one
		// gave back.
		fifth := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 1}, host(0))
		freed := env(ones[2], tpu.EnvVisibleChips).Env
		is.NoErr(ones[2].Kill(ctx))
		is.Equal(env(fifth, tpu.EnvVisibleChips).Env, freed)

		// Two chips: an aligned pair each (the device plugin's NUMA-aligned
		// choice), with Ray's bounds for two.
		a := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 2}, host(1))
		b := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 2}, host(1))
		pairs := []string{env(a, tpu.EnvVisibleChips).Env, env(b, tpu.EnvVisibleChips).Env}
		slices.Sort(pairs)
		is.Equal(pairs, []string{"0,1", "2,3"})
		is.Equal(env(a, tpu.EnvChipsPerHostBounds).Env, "1,2,1")

		// The whole host: no chip variables (the host's env stands), as in
		// Ray; a task with one chip gets one.
		whole := counterClass.Remote(ctx, c, 0, ray.Resources{ray.TPU: 4}, host(2))
		is.Equal(env(whole, tpu.EnvVisibleChips).Env, "")
		got, err := tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{ray.TPU: 1}, host(3)).Get(ctx)
		is.NoErr(err)
		is.Equal(got[tpu.EnvVisibleChips], "0")
		is.Equal(got["NODE"], "slice-a-3")

		// Placement group bundles hold chips too, and their work gets them.
		pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Strategy: ray.StrictPack, Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.TPU: 2, ray.CPU: 1}, LabelSelector: host(3)},
			{Resources: ray.Resources{ray.TPU: 2, ray.CPU: 1}, LabelSelector: host(3)},
		}})
		is.NoErr(err)
		is.NoErr(pg.Ready(ctx))
		var inBundles []string
		for i := range 2 {
			got, err := tpuEnv.Remote(ctx, c, struct{}{}, ray.InBundle(pg, i), ray.Resources{ray.TPU: 2}).Get(ctx)
			is.NoErr(err)
			inBundles = append(inBundles, got[tpu.EnvVisibleChips])
		}
		slices.Sort(inBundles)
		is.Equal(inBundles, []string{"0,1", "2,3"})
		is.NoErr(pg.Remove(ctx))

		for _, h := range append(ones, fifth, a, b, whole) {
			if h != ones[2] {
				is.NoErr(h.Kill(ctx))
			}
		}
		allFree(t, c)
	})
	t.Run("WorkBesideAReservation", func(t *testing.T) {
		// Work on a reserved host that is not the reservation's (CPU its
		// bundles leave free, no placement in its group) is not stopped by
		// its release: actors living there keep their state, and tasks
		// placed on the hosts just after the release run.
		s.need(t, finite, "TPUSlices")
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		spg, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		hosts, slice := spg.Hosts(), spg.SliceNames()[0]
		host := func(w int) ray.NodeSelector {
			return ray.NodeSelector{tpu.LabelSliceName: slice, tpu.LabelWorkerID: strconv.Itoa(w)}
		}
		var actors []*ray.ActorHandle[*counter]
		for i := range hosts {
			a := counterClass.Remote(ctx, c, 0, ray.Resources{ray.CPU: 1}, host(i))
			actors = append(actors, a)
			w, err := counterWhere.Remote(ctx, a, "").Get(ctx)
			is.NoErr(err)
			is.Equal(w.Node, hosts[i])
			n, err := counterAdd.Remote(ctx, a, 1).Get(ctx)
			is.NoErr(err)
			is.Equal(n, 1)
		}
		is.NoErr(spg.Release(ctx))
		var refs []ray.ObjectRef[map[string]string]
		for i := range 2 * len(hosts) {
			refs = append(refs, tpuEnv.Remote(ctx, c, struct{}{}, ray.Resources{ray.CPU: 1}, host(i%len(hosts))))
		}
		for i, ref := range refs {
			env, err := ref.Get(ctx)
			is.NoErr(err) // placed on a host whose reservation was just released
			is.Equal(env["NODE"], hosts[i%len(hosts)])
		}
		for _, a := range actors {
			n, err := counterAdd.Remote(ctx, a, 1).Get(ctx)
			is.NoErr(err)  // alive after the release
			is.Equal(n, 2) // the same instance, not a restarted one
			is.NoErr(a.Kill(ctx))
		}
		allFree(t, c)
	})
	t.Run("BusyWaitsThenTimesOut", func(t *testing.T) {
		s.need(t, finite, "TPUSlices")
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		held, err := ray.NewSlicePlacementGroup(ctx, c, one)
		is.NoErr(err)
		// One slice is free, two are asked for: wait, then nothing held.
		_, err = ray.NewSlicePlacementGroup(timeout(t, ctx, 50*time.Millisecond), c, two)
		is.True(errors.Is(err, context.DeadlineExceeded))
		is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
		// The error says what was asked and how the slices of that shape
		// stood when the wait ended.
		is.True(strings.Contains(err.Error(), "2 × v6e 4x4"))
		is.True(strings.Contains(err.Error(), "1 free, 1 busy, 0 broken"))
		states, err := ray.TPUSlices(ctx, c)
		is.NoErr(err)
		reserved := 0
		for _, st := range states {
			if st.ReservedBy != 0 {
				reserved++
			}
		}
		is.Equal(reserved, 1) // the free slice was not taken
		is.NoErr(held.Release(ctx))
		both, err := ray.NewSlicePlacementGroup(ctx, c, two)
		is.NoErr(err)
		is.NoErr(both.Release(ctx))
		allFree(t, c)
	})
	t.Run("FailFast", func(t *testing.T) {
		s.need(t, finite, "TPUSlices")
		is := is.New(t)
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		_, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 3})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "8x8", AcceleratorVersion: "v6e"})
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"})
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "4x4"))
		allFree(t, c)
	})
	t.Run("Contention", func(t *testing.T) {
		s.need(t, finite, "TPUSlices")
		c := s.cluster(t, DefaultTPUNodes())
		rounds := s.h.ContentionRounds
		if rounds <= 0 {
			rounds = 5
		}
		var mu sync.Mutex
		holder := map[string]int{}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range rounds {
					if !contentionRound(t, c, one, s.patience(), g, &mu, holder) {
						return
					}
				}
			})
		}
		wg.Wait()
		allFree(t, c)
	})
}

// contentionRound reserves one slice as goroutine g of TPUSlices/Contention,
// checks that no other goroutine holds it, runs work on every host of it
// and releases it; false when it could not reserve. patience bounds the
// round (the reservation, waiting its turn among the others, and the work
// on it), so that a slow backend under load has it for every round, not
// for all of them together.
func contentionRound(t *testing.T, c *ray.Cluster, spec ray.SliceSpec, patience time.Duration, g int, mu *sync.Mutex, holder map[string]int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	spg, err := ray.NewSlicePlacementGroup(ctx, c, spec)
	if err != nil {
		t.Error(err)
		return false
	}
	name := spg.SliceNames()[0]
	mu.Lock()
	if h, ok := holder[name]; ok {
		t.Errorf("slice %s held by %d and %d", name, h, g)
	}
	holder[name] = g
	mu.Unlock()
	// Hold the slice while work runs on it, so that a second grant of it
	// would be seen.
	if _, err := ray.RunOnSlice(ctx, spg, tpuEnv, struct{}{}); err != nil {
		t.Error(err)
	}
	mu.Lock()
	delete(holder, name)
	mu.Unlock()
	if err := spg.Release(ctx); err != nil {
		t.Error(err)
	}
	return true
}
