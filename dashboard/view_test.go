package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/matryer/is"
	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster starts a simulator with two v6e 4x4 slices, one v5p 2x2x2, one
// v6e 8x8 labelled for 4x4 sub-slices, and a CPU node.
func cluster(t *testing.T) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes: []local.NodeSpec{{Name: "cpu", Resources: backend.Resources{backend.CPU: 4}}},
		TPUSlices: []local.TPUSliceSpec{
			{Generation: "v6e", Topology: "4x4", Count: 2},
			{Generation: "v5p", Topology: "2x2x2"},
			{Generation: "v6e", Topology: "8x8", Subslices: []string{"4x4"}},
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(t.Context(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func findSlice(v *dashboard.View, name string) (dashboard.Slice, bool) {
	for _, sh := range v.Shapes {
		for _, s := range sh.Slices {
			if s.Name == name {
				return s, true
			}
		}
	}
	return dashboard.Slice{}, false
}

// chipStates counts a slice's chips per state.
func chipStates(s dashboard.Slice) map[string]int {
	m := map[string]int{}
	for _, c := range s.Chips {
		m[c.State]++
	}
	return m
}

func TestViewSlices(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", Name: "trainer"})
	is.NoErr(err)
	defer spg.Release(ctx)
	reserved := spg.SliceNames()[0]
	sr := c.Backend().(backend.SliceReserver)
	sub, err := sr.ReserveSlices(ctx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("8x8")}, Subslice: "4x4", Name: "small"})
	is.NoErr(err)
	defer c.Backend().RemovePlacementGroup(ctx, sub.Group)
	is.NoErr(c.Backend().(backend.FaultInjector).KillNode(ctx, "v5p-16-0-w1"))

	v := d.View(ctx)
	is.Equal(v.Problems, nil)
	is.Equal(len(v.Shapes), 3) // v6e 4x4, v5p 2x2x2, v6e 8x8
	is.Equal(v.Shapes[0].Total, 2)
	is.Equal(v.Shapes[0].Reserved, 1)
	is.Equal(v.Shapes[0].Free, 1)

	tests := []struct {
		slice     string
		state     string
		dims      [3]int
		chips     map[string]int
		groupName string
	}{
		{reserved, dashboard.StateReserved, [3]int{4, 4, 1}, map[string]int{"reserved": 16}, "trainer"},
		{other(reserved), dashboard.StateFree, [3]int{4, 4, 1}, map[string]int{"free": 16}, ""},
		{"v5p-16-0", dashboard.StateBroken, [3]int{2, 2, 2}, map[string]int{"free": 4, "dead": 4}, ""},
		{"v6e-64-0", dashboard.StatePartial, [3]int{8, 8, 1}, map[string]int{"free": 48, "reserved": 16}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.slice, func(t *testing.T) {
			is := is.New(t)
			s, ok := findSlice(v, tt.slice)
			is.True(ok)
			is.Equal(s.State, tt.state)
			is.Equal(s.Dims, tt.dims)
			is.Equal(chipStates(s), tt.chips)
			is.Equal(s.GroupName, tt.groupName)
		})
	}

	t.Run("the dead host's chips are the ones the grid gives its worker", func(t *testing.T) {
		is := is.New(t)
		s, _ := findSlice(v, "v5p-16-0")
		for _, ch := range s.Chips {
			is.Equal(ch.State == dashboard.StateDead, s.Hosts[ch.Worker].Node == "v5p-16-0-w1")
		}
	})
	t.Run("reservations list both groups with their slices", func(t *testing.T) {
		is := is.New(t)
		is.Equal(len(v.Reservations), 2)
		is.Equal(v.Reservations[0].Name, "trainer")
		is.Equal(v.Reservations[0].Slices, []string{reserved})
		is.Equal(v.Reservations[1].Group, uint64(sub.Group))
		is.Equal(v.Reservations[1].Subslice, "4x4")
		is.Equal(v.Reservations[1].Name, "small") // from its placement group
	})
	t.Run("nodes report dead hosts and used resources", func(t *testing.T) {
		is := is.New(t)
		for _, n := range v.Nodes {
			is.Equal(n.Alive, n.Name != "v5p-16-0-w1")
			if n.Name == spg.Hosts()[0] {
				is.Equal(n.Used[backend.TPU], 4.0)
			}
		}
	})
	t.Run("placement groups show where their bundles are", func(t *testing.T) {
		is := is.New(t)
		is.Equal(len(v.Work.PlacementGroups), 2)
		is.Equal(v.Work.PlacementGroups[0].Bundles, spg.Hosts())
	})
}

func other(name string) string {
	if name == "v6e-16-0" {
		return "v6e-16-1"
	}
	return "v6e-16-0"
}

func TestViewReleased(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2", Name: "a"})
	is.NoErr(err)
	s, _ := findSlice(d.View(ctx), "v5p-16-0")
	is.Equal(s.State, dashboard.StateReserved)
	is.NoErr(spg.Release(ctx))
	v := d.View(ctx)
	s, _ = findSlice(v, "v5p-16-0")
	is.Equal(s.State, dashboard.StateFree)
	is.Equal(len(v.Reservations), 0)
}

func TestViewRunningTasks(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	started, release := make(chan struct{}, 2), make(chan struct{})
	blockStarted, blockRelease = started, release
	r1 := block.Remote(ctx, c, 1)
	r2 := block.Remote(ctx, c, 2)
	<-started
	<-started
	v := d.View(ctx)
	close(release)
	is.Equal(v.Work.Running, 2)
	is.Equal(v.Work.Tasks, []dashboard.TaskCount{{Name: "dashboard_test.block", Queued: 0, Running: 2}})
	_, err = r1.Get(ctx)
	is.NoErr(err)
	_, err = r2.Get(ctx)
	is.NoErr(err)
}

// block signals blockStarted and waits for blockRelease; one test at a
// time sets them.
var (
	blockStarted chan struct{}
	blockRelease chan struct{}
	block        = ray.NewTask("dashboard_test.block", func(ctx context.Context, _ int) (int, error) {
		blockStarted <- struct{}{}
		select {
		case <-blockRelease:
		case <-ctx.Done():
		}
		return 0, nil
	})
)

func TestViewMultisliceAndPending(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	ctx := timeout(t)
	d, err := dashboard.New(c, nil)
	is.NoErr(err)
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", NumSlices: 2, Name: "multi"})
	is.NoErr(err)

	// A third request for the shape waits until the multislice is released.
	waiting := make(chan error, 1)
	go func() {
		w, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", Name: "next"})
		if err == nil {
			err = w.Release(ctx)
		}
		waiting <- err
	}()
	var v *dashboard.View
	for v = d.View(ctx); len(v.Pending) == 0; v = d.View(ctx) {
		if ctx.Err() != nil {
			t.Fatal("the waiting request never showed")
		}
	}
	is.Equal(v.Pending[0].Name, "next")
	is.Equal(v.Pending[0].Topology, "4x4")
	is.Equal(len(v.Reservations), 1) // both slices in one reservation
	is.Equal(v.Reservations[0].Name, "multi")
	is.Equal(v.Reservations[0].Slices, []string{"v6e-16-0", "v6e-16-1"})
	is.Equal(v.Shapes[0].Reserved, 2)
	is.NoErr(spg.Release(ctx))
	is.NoErr(<-waiting)
}
