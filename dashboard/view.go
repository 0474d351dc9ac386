package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/samber/lo"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/natsort"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/tpu"
)

// View is one point-in-time picture of a cluster, as GET /api/view serves
// it and /api/events streams it. Parts the backend cannot report are
// empty, and Problems says why.
type View struct {
	Time time.Time `json:"time"`
	// Nodes are the cluster's nodes, by name, digit runs as numbers (w2
	// before w10).
	Nodes []Node `json:"nodes"`
	// Shapes group the TPU slices by generation, topology and chips per
	// host, in the order shapes first appear.
	Shapes []Shape `json:"shapes"`
	// Reservations are the slice reservations, each with all its slices
	// (a multislice reservation holds several), by group ID.
	Reservations []Reservation `json:"reservations"`
	// Pending are the slice requests that wait for slices.
	Pending []backend.PendingSliceRequest `json:"pending"`
	Work    Work                          `json:"work"`
	Train   []RunStatus                   `json:"train"`
	Serve   []serve.DeploymentStatus      `json:"serve"`
	// Counters are the backend's cumulative counts (tasks and calls by
	// name, worker restarts, slice reservation waits), or nil.
	Counters *backend.Counters `json:"counters,omitempty"`
	// Problems are the parts of the view that could not be read, such as
	// "snapshot: backend cannot report its state".
	Problems []string `json:"problems,omitempty"`
}

// Node is one node of the cluster.
type Node struct {
	Name   string            `json:"name"`
	Alive  bool              `json:"alive"`
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity is the node's total, Free what nothing holds, Used the
	// difference.
	Capacity backend.Resources `json:"capacity"`
	Free     backend.Resources `json:"free"`
	Used     backend.Resources `json:"used"`
	Running  int               `json:"running"`
	// Output is the last lines the node's work wrote to stdout and
	// stderr, oldest first (backends with worker processes or pods).
	Output []string `json:"output,omitempty"`
}

// Shape counts and lists the slices of one shape.
type Shape struct {
	ray.SliceSummary
	Slices []Slice `json:"slices"`
}

// The states of a slice and of a chip.
const (
	// StateFree is an intact, idle, unreserved slice or chip.
	StateFree = "free"
	// StateReserved is held by a reservation (a placement group).
	StateReserved = "reserved"
	// StateBusy is running work outside any reservation.
	StateBusy = "busy"
	// StateDead is a chip on a dead host; a slice with one is "broken".
	StateDead = "dead"
	// StateBroken is a slice with a dead host.
	StateBroken = "broken"
	// StatePartial is a slice with reserved sub-slices and no reservation
	// of its own.
	StatePartial = "partial"
)

// Slice is one TPU slice and its chip grid.
type Slice struct {
	Name         string `json:"name"`
	Generation   string `json:"generation"`
	Topology     string `json:"topology"`
	ChipsPerHost int    `json:"chipsPerHost"`
	// State is free, reserved, partial (sub-slices reserved), busy or
	// broken (a dead host; broken wins over the others).
	State string `json:"state"`
	// Group and GroupName are the reservation holding the whole slice.
	Group     uint64 `json:"group,omitempty"`
	GroupName string `json:"groupName,omitempty"`
	// Dims are the chip grid's x, y and z (z is 1 for 2-D topologies).
	Dims  [3]int                   `json:"dims"`
	Hosts []backend.SliceHostState `json:"hosts"`
	// Chips are the chips x-fastest, then y, then z.
	Chips []Chip `json:"chips"`
}

// Chip is one chip of a slice's grid.
type Chip struct {
	X int `json:"x"`
	Y int `json:"y"`
	Z int `json:"z"`
	// Worker is the worker ID of the chip's host.
	Worker int `json:"worker"`
	// State is free, reserved, busy or dead.
	State string `json:"state"`
	// Group is the reservation holding the chip (the slice's or a
	// sub-slice's), or 0.
	Group uint64 `json:"group,omitempty"`
	// Metrics are the chip's utilisation as its node reports it (on
	// Kubernetes, the GKE TPU device plugin's duty cycle, tensor-core
	// utilisation and HBM), or nil.
	Metrics *tpu.ChipMetrics `json:"metrics,omitempty"`
}

// Reservation is one slice reservation with all of its slices.
type Reservation struct {
	Group  uint64   `json:"group"`
	Name   string   `json:"name"`
	Slices []string `json:"slices"`
	// Subslice is the sub-slice topology of a sub-slice reservation.
	Subslice string `json:"subslice,omitempty"`
}

// Work is what the cluster is doing.
type Work struct {
	// Queued counts tasks, calls and actors waiting; Running counts tasks
	// running.
	Queued  int `json:"queued"`
	Running int `json:"running"`
	// Tasks counts queued and running tasks per name, most running
	// first, then most queued.
	Tasks           []TaskCount          `json:"tasks"`
	Actors          []backend.ActorState `json:"actors"`
	PlacementGroups []PlacementGroup     `json:"placementGroups"`
	// Failures are the most recent failed attempts of tasks and actor
	// calls, newest first, at most [backend.RecentFailures].
	Failures []Failure `json:"failures"`
}

// TaskCount is how many tasks of one name wait for resources and run now.
type TaskCount struct {
	Name    string `json:"name"`
	Queued  int    `json:"queued"`
	Running int    `json:"running"`
}

// Failure is one failed attempt of a task or actor call.
type Failure struct {
	// Task is the task's name, or "Class.Method" for an actor call.
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	// Code is the error code's name, such as "TaskFailed" or
	// "Unavailable" (a lost node); Message the error's text.
	Code    string    `json:"code"`
	Message string    `json:"message"`
	Node    string    `json:"node,omitempty"`
	Time    time.Time `json:"time"`
}

// PlacementGroup is one placement group and the node of each bundle.
type PlacementGroup struct {
	ID       uint64   `json:"id"`
	Name     string   `json:"name"`
	Strategy string   `json:"strategy"`
	State    string   `json:"state"`
	Bundles  []string `json:"bundles"`
}

// buildView reads the cluster and the tracked runs and deployments.
func (d *Dashboard) buildView(ctx context.Context) *View {
	v := &View{Time: time.Now()}
	if snap, err := d.c.Snapshot(ctx); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("cluster state: %v", err))
	} else {
		v.Nodes = nodes(snap)
		v.Work = work(snap)
		v.Counters = snap.Counters
		if or, ok := ray.As[backend.OutputReader](d.c); ok {
			for i := range v.Nodes {
				v.Nodes[i].Output = or.RecentOutput(v.Nodes[i].Name)
			}
		}
	}
	if states, err := ray.TPUSlices(ctx, d.c); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("TPU slices: %v", err))
	} else {
		v.Shapes, v.Reservations = shapes(states)
		for i, r := range v.Reservations { // a sub-slice's state does not name its group
			if j := slices.IndexFunc(v.Work.PlacementGroups, func(g PlacementGroup) bool { return g.ID == r.Group }); r.Name == "" && j >= 0 {
				v.Reservations[i].Name = v.Work.PlacementGroups[j].Name
			}
		}
	}
	if nodes, err := d.chipMetrics(ctx); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("TPU chip metrics: %v", err))
	} else if len(nodes) > 0 {
		addChipMetrics(v, nodes)
	}
	if pending, err := ray.PendingSliceRequests(ctx, d.c); err != nil {
		v.Problems = append(v.Problems, fmt.Sprintf("pending slice requests: %v", err))
	} else {
		v.Pending = pending
	}
	d.mu.Lock()
	runs, servers := slices.Clone(d.runs), slices.Clone(d.servers)
	d.mu.Unlock()
	for _, r := range runs {
		v.Train = append(v.Train, r.Status())
	}
	for _, s := range servers {
		v.Serve = append(v.Serve, s.Status().Deployments...)
	}
	return v
}

func nodes(snap *backend.State) []Node {
	out := lo.Map(snap.Nodes, func(n backend.NodeState, _ int) Node {
		used := backend.Resources{}
		for k, c := range n.Capacity {
			used[k] = c - n.Free[k]
		}
		return Node{Name: n.Name, Alive: n.Alive, Labels: n.Labels, Capacity: n.Capacity, Free: n.Free, Used: used, Running: n.Running}
	})
	// As people read names: w2 before w10.
	slices.SortFunc(out, func(a, b Node) int { return natsort.Compare(a.Name, b.Name) })
	return out
}

func work(snap *backend.State) Work {
	w := Work{Queued: snap.Queued, Running: snap.Running, Actors: snap.Actors}
	w.Tasks = lo.Map(snap.Tasks, func(t backend.TaskSummary, _ int) TaskCount {
		return TaskCount{Name: t.Name, Queued: t.Queued, Running: t.Running}
	})
	slices.SortFunc(w.Tasks, func(a, b TaskCount) int {
		return cmp.Or(cmp.Compare(b.Running, a.Running), cmp.Compare(b.Queued, a.Queued), cmp.Compare(a.Name, b.Name))
	})
	w.Failures = lo.Map(snap.Failures, func(f backend.TaskFailure, _ int) Failure {
		return Failure{Task: f.Task, Attempt: f.Attempt, Code: f.Code.String(), Message: f.Message, Node: f.Node, Time: f.Time}
	})
	slices.Reverse(w.Failures) // newest first
	w.PlacementGroups = lo.Map(snap.PlacementGroups, func(g backend.PlacementGroupState, _ int) PlacementGroup {
		return PlacementGroup{ID: uint64(g.ID), Name: g.Name, Strategy: fmt.Sprint(g.Strategy), State: g.State, Bundles: g.Nodes}
	})
	return w
}

// shapes groups slices by shape and collects the reservations.
func shapes(states []backend.SliceState) ([]Shape, []Reservation) {
	var out []Shape
	for _, sum := range ray.SummarizeSlices(states) {
		out = append(out, Shape{SliceSummary: sum})
	}
	res := map[uint64]*Reservation{}
	for _, st := range states {
		i := slices.IndexFunc(out, func(s Shape) bool {
			return s.Generation == st.Generation && s.Topology == st.Topology && s.ChipsPerHost == st.ChipsPerHost
		})
		out[i].Slices = append(out[i].Slices, slice(st))
		if st.ReservedBy != 0 {
			r := reservation(res, uint64(st.ReservedBy), st.ReservedName)
			r.Slices = append(r.Slices, st.Name)
		}
		for _, sub := range st.Subslices {
			r := reservation(res, uint64(sub.ReservedBy), "")
			r.Slices = append(r.Slices, st.Name)
			r.Subslice = sub.Topology
		}
	}
	list := lo.Map(lo.Values(res), func(r *Reservation, _ int) Reservation { return *r })
	slices.SortFunc(list, func(a, b Reservation) int { return cmp.Compare(a.Group, b.Group) })
	return out, list
}

func reservation(m map[uint64]*Reservation, group uint64, name string) *Reservation {
	r, ok := m[group]
	if !ok {
		r = &Reservation{Group: group, Name: name}
		m[group] = r
	}
	if r.Name == "" {
		r.Name = name
	}
	return r
}

// slice lays out a slice's chips as ray.FormatSlices does: chip (x, y, z)
// belongs to worker shape.WorkerOfChip(x, y, z).
func slice(st backend.SliceState) Slice {
	s := Slice{
		Name: st.Name, Generation: st.Generation, Topology: st.Topology, ChipsPerHost: st.ChipsPerHost,
		Group: uint64(st.ReservedBy), GroupName: st.ReservedName, Hosts: st.Hosts,
	}
	switch {
	case !st.Intact:
		s.State = StateBroken
	case st.ReservedBy != 0:
		s.State = StateReserved
	case len(st.Subslices) > 0:
		s.State = StatePartial
	case !st.Idle:
		s.State = StateBusy
	default:
		s.State = StateFree
	}
	shape, err := tpu.NewSliceShape(tpu.Generation(st.Generation), st.Topology, st.ChipsPerHost)
	if err != nil {
		return s // no grid for a shape package tpu does not know
	}
	dims := shape.Topology.Dims()
	s.Dims = [3]int{dims[0], dims[1], 1}
	if len(dims) == 3 {
		s.Dims[2] = dims[2]
	}
	subGroup := map[string]uint64{} // host → sub-slice reservation
	for _, sub := range st.Subslices {
		for _, h := range sub.Hosts {
			subGroup[h] = uint64(sub.ReservedBy)
		}
	}
	for z := range s.Dims[2] {
		for y := range s.Dims[1] {
			for x := range s.Dims[0] {
				c := Chip{X: x, Y: y, Z: z, Worker: shape.WorkerOfChip(x, y, z), State: StateFree, Group: s.Group}
				if c.Group != 0 {
					c.State = StateReserved
				}
				if c.Worker >= 0 && c.Worker < len(st.Hosts) {
					h := st.Hosts[c.Worker]
					switch g := subGroup[h.Node]; {
					case !h.Alive:
						c.State = StateDead
					case g != 0:
						c.State, c.Group = StateReserved, g
					case c.Group == 0 && h.ChipsInUse > 0:
						c.State = StateBusy
					}
				}
				s.Chips = append(s.Chips, c)
			}
		}
	}
	return s
}
