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
		is.Equal(ray.Code(err), ray.Infeasible) // one unit per host
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
		is.Equal(ray.Code(err), ray.DeadlineExceeded)
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
		is.Equal(ray.Code(err), ray.Infeasible)
		_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "8x8", AcceleratorVersion: "v6e"})
		is.Equal(ray.Code(err), ray.Infeasible)
		_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"})
		is.Equal(ray.Code(err), ray.InvalidArgument)
		is.True(strings.Contains(err.Error(), "4x4"))
		allFree(t, c)
	})
	t.Run("Contention", func(t *testing.T) {
		s.need(t, finite, "TPUSlices")
		c, ctx := s.cluster(t, DefaultTPUNodes()), s.ctxT(t)
		var mu sync.Mutex
		holder := map[string]int{}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 5 {
					spg, err := ray.NewSlicePlacementGroup(ctx, c, one)
					if err != nil {
						t.Error(err)
						return
					}
					name := spg.SliceNames()[0]
					mu.Lock()
					if h, ok := holder[name]; ok {
						t.Errorf("slice %s held by %d and %d", name, h, g)
					}
					holder[name] = g
					mu.Unlock()
					// Hold the slice while work runs on it, so that a
					// second grant of it would be seen.
					if _, err := ray.RunOnSlice(ctx, spg, tpuEnv, struct{}{}); err != nil {
						t.Error(err)
					}
					mu.Lock()
					delete(holder, name)
					mu.Unlock()
					if err := spg.Release(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		allFree(t, c)
	})
}
