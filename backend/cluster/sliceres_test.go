package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// namedHosts returns the four hosts of each v6e 4x4 slice s0, s1, ...
// with Ray's TPU resources (tpu.HostResources: the slice's name on every
// host, the head resource on worker 0).
func namedHosts(n int) []cluster.Node {
	out := tpuHosts4x4(n)
	for i := range out {
		h := out[i].TPU
		for k, v := range tpu.HostResources(h.Shape, h.Slice, h.WorkerID) {
			out[i].Resources[k] = v
		}
	}
	return out
}

// nodeExec runs every task by answering the name of its node; a task
// named "block" first waits for release to be closed.
type nodeExec struct {
	nopExec
	release chan struct{}
}

func (e nodeExec) RunTask(ctx context.Context, name string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if name == "block" {
		select {
		case <-e.release:
		case <-ctx.Done():
		}
	}
	return backend.Value{Data: []byte(info.Node)}, nil
}

func (nodeExec) HasTask(name string) bool { return name == "where" || name == "block" }

func (nodeExec) HasActorMethod(class, method string) bool { return class == "c" }

func startExec(t *testing.T, nodes []cluster.Node, exec backend.Executor) (*cluster.Runtime, *testSource) {
	t.Helper()
	src := newTestSource(t, nodes)
	rt, err := cluster.New(src, newTestRunner(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(context.Background(), exec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, src
}

func submit(ctx context.Context, rt *cluster.Runtime, name string, res backend.Resources, pl backend.Placement) (backend.ObjectID, error) {
	if pl.Group == 0 {
		pl.Bundle = -1
	}
	return rt.SubmitTask(ctx, &backend.TaskSpec{Name: name, Scheduling: backend.Scheduling{Resources: res, Placement: pl}})
}

func runOn(t *testing.T, rt *cluster.Runtime, res backend.Resources, pl backend.Placement) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := submit(ctx, rt, "where", res, pl)
	if err != nil {
		return "", err
	}
	v, err := rt.Get(ctx, id)
	return string(v.Data), err
}

// A slice's name resource takes work to that slice's hosts only, counts
// one per host, and is a resource of those hosts alone in snapshots, as
// Ray's <TPU_NAME>: 1 is.
func TestNamedSliceResource(t *testing.T) {
	is := is.New(t)
	release := make(chan struct{})
	rt, _ := startExec(t, namedHosts(3), nodeExec{release: release})
	head := shape4x4.HeadResource()

	for range 12 {
		node, err := runOn(t, rt, backend.Resources{"s1": 1}, backend.Placement{})
		is.NoErr(err)
		is.True(strings.HasPrefix(node, "s1-")) // a host of the named slice
	}
	node, err := runOn(t, rt, backend.Resources{"s2": 1, head: 1}, backend.Placement{})
	is.NoErr(err)
	is.Equal(node, "s2-w0") // the head resource is worker 0's

	// One unit per host: four blocked tasks hold s1's four hosts, a fifth
	// waits, while s0's unit on the same column of other hosts is free.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []backend.ObjectID
	for range 5 {
		id, err := submit(ctx, rt, "block", backend.Resources{"s1": 1}, backend.Placement{})
		is.NoErr(err)
		held = append(held, id)
	}
	node, err = runOn(t, rt, backend.Resources{"s0": 1}, backend.Placement{})
	is.NoErr(err)
	is.True(strings.HasPrefix(node, "s0-"))
	st, err := rt.Snapshot(ctx)
	is.NoErr(err)
	running := 0
	for _, n := range st.Nodes {
		if strings.HasPrefix(n.Name, "s1-") {
			is.Equal(n.Capacity["s1"], 1.0) // named after its own slice
			is.Equal(n.Free["s1"], 0.0)     // each of the four holds one
			running += n.Running
		}
		for _, other := range []string{"s0", "s1", "s2"} {
			if !strings.HasPrefix(n.Name, other+"-") {
				_, ok := n.Capacity[other]
				is.True(!ok) // another slice's name is not this host's
			}
		}
	}
	is.Equal(running, 4)
	is.Equal(st.Queued, 1)
	close(release)
	for _, id := range held {
		v, err := rt.Get(ctx, id)
		is.NoErr(err)
		is.True(strings.HasPrefix(string(v.Data), "s1-"))
	}
}

func TestNamedSliceResourceBadDemands(t *testing.T) {
	is := is.New(t)
	rt, _ := startExec(t, namedHosts(3), nodeExec{})
	ctx := context.Background()

	_, err := submit(ctx, rt, "where", backend.Resources{"s1": 2}, backend.Placement{})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "s1: 2")) // what was asked
	is.True(strings.Contains(err.Error(), "s1: 1")) // what the slice's hosts have

	_, err = submit(ctx, rt, "where", backend.Resources{"s2": 1, "s0": 1}, backend.Placement{})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), `two TPU slices, "s0" and "s2"`))

	_, err = rt.SubmitTask(ctx, &backend.TaskSpec{Name: "where", Scheduling: backend.Scheduling{
		Resources: backend.Resources{"s1": 1}, NodeSelector: backend.LabelSelector{tpu.LabelWorkerID: "7"}, Placement: backend.Placement{Bundle: -1},
	}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), `none of the 12 live nodes is a host of TPU slice "s1" that matches the selector`))

	// An unknown name lists the cluster's resources, the slices' names in
	// one phrase, not one entry per slice.
	_, err = submit(ctx, rt, "where", backend.Resources{"s9": 1}, backend.Placement{})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), `the names of its 3 TPU slices (such as "s0")`))
	is.True(!strings.Contains(err.Error(), `"s2"`))

	// A slice reservation picks its slices: its bundles cannot name one.
	_, err = rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, BundleResources: backend.Resources{backend.TPU: 4, "s1": 1}})
	is.Equal(backend.CodeOf(err), backend.InvalidArgument)
	is.True(strings.Contains(err.Error(), `ray.Resources{"s1": 1}`))
	_, err = rt.ReserveSlices(ctx, &backend.SliceRequest{Shape: shape4x4, Subslice: "2x4", BundleResources: backend.Resources{backend.TPU: 4, "s1": 1}})
	is.Equal(backend.CodeOf(err), backend.InvalidArgument)
}

// A bundle that reserved a slice's name resource sits on that slice, and
// work in it may ask for that name, not another slice's.
func TestNamedSliceResourceInBundle(t *testing.T) {
	is := is.New(t)
	rt, _ := startExec(t, namedHosts(3), nodeExec{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{
		{Resources: backend.Resources{backend.CPU: 1, "s2": 1}},
	}})
	is.NoErr(err)
	is.NoErr(rt.PlacementGroupReady(ctx, id))
	node, err := runOn(t, rt, backend.Resources{"s2": 1}, backend.Placement{Group: id, Bundle: 0})
	is.NoErr(err)
	is.True(strings.HasPrefix(node, "s2-"))
	_, err = runOn(t, rt, backend.Resources{"s0": 1}, backend.Placement{Group: id, Bundle: 0})
	is.Equal(backend.CodeOf(err), backend.Infeasible) // the bundle holds s2's unit, not s0's
	is.NoErr(rt.RemovePlacementGroup(ctx, id))

	_, err = rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{
		{Resources: backend.Resources{"s0": 1, "s1": 1}},
	}})
	is.Equal(backend.CodeOf(err), backend.Infeasible)
	is.True(strings.Contains(err.Error(), "bundle 0"))
}

// A node that reports another slice's name as a resource of its own,
// after that slice's hosts, does not get that slice's work: the name is
// the slice's hosts' alone.
func TestNamedSliceResourceOnAnotherNode(t *testing.T) {
	is := is.New(t)
	nodes := namedHosts(2)
	i := slices.IndexFunc(nodes, func(n cluster.Node) bool { return n.Name == "s0-w1" })
	odd := nodes[i]
	odd.Resources["s1"] = 1
	nodes = append(slices.Delete(nodes, i, i+1), odd) // after s1's hosts
	rt, _ := startExec(t, nodes, nodeExec{})
	for range 12 {
		node, err := runOn(t, rt, backend.Resources{"s1": 1}, backend.Placement{})
		is.NoErr(err)
		is.True(strings.HasPrefix(node, "s1-"))
	}
	st, err := rt.Snapshot(context.Background())
	is.NoErr(err)
	for _, n := range st.Nodes {
		if n.Name == "s0-w1" {
			is.Equal(n.Capacity["s0"], 1.0)
			_, ok := n.Capacity["s1"]
			is.True(!ok)
		}
	}
}

// Placement groups are built while nodes with new resource names join:
// the names are read under the runtime's lock (go test -race).
func TestPlacementGroupsWhileNodesJoin(t *testing.T) {
	is := is.New(t)
	rt, src := startExec(t, namedHosts(1), nodeExec{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			src.mu.Lock()
			src.sink.NodeAdded(cluster.Node{Name: fmt.Sprintf("cpu-%d", i), Resources: backend.Resources{backend.CPU: 1, fmt.Sprintf("r%d", i): 1}})
			src.mu.Unlock()
		}
	})
	var ids []backend.PlacementGroupID
	for i := range 200 {
		id, err := rt.CreatePlacementGroup(ctx, &backend.PlacementGroupSpec{Strategy: backend.Pack, Bundles: []backend.Bundle{
			{Resources: backend.Resources{backend.CPU: 1, fmt.Sprintf("r%d", i%8): 0}},
		}})
		is.NoErr(err)
		ids = append(ids, id)
	}
	wg.Wait()
	for _, id := range slices.Backward(ids) {
		is.NoErr(rt.RemovePlacementGroup(ctx, id))
	}
}
