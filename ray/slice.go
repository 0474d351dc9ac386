package ray

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// SliceSpec is the Go form of Ray's
// slice_placement_group(topology, accelerator_version, resources_per_bundle,
// num_slices, chips_per_vm, name, strategy, timeout), without strategy:
// every bundle of a slice reservation is pinned to its host in worker-ID
// order, so no placement strategy could change where it runs, and an
// option accepted only to be ignored would mislead.
type SliceSpec struct {
	// Topology is the chip grid of each slice, such as "4x4" or "2x2x2".
	Topology string
	// AcceleratorVersion is the TPU generation: "v6e", "TPU-V6E", "v5p",
	// "tpu7x", ...
	AcceleratorVersion string
	// ResourcesPerBundle is one bundle's resources. Nil means one bundle
	// per host of {CPU: 1, TPU: chips per host}; otherwise CPU defaults to
	// 1 and TPU to the chips per host, and each host's chips must divide
	// evenly into bundles ({TPU: 1} on v6e 4x4 gives 16 bundles).
	ResourcesPerBundle Resources
	// NumSlices is the number of whole slices (multislice over DCN when
	// more than 1); 0 means 1.
	NumSlices int
	// ChipsPerVM overrides the chips per host for ambiguous shapes such as
	// v6e 2x4 (one 8-chip host, the default, or two 4-chip hosts).
	ChipsPerVM int
	// Name names the reservation.
	Name string
	// Timeout bounds the wait for free slices; 0 waits as long as ctx.
	Timeout time.Duration
}

// SlicePlacementGroup is a reservation of whole TPU slices: every host of
// NumSlices intact, idle slices of one generation and topology, reserved in
// one atomic step, with a placement group whose bundles are pinned to those
// hosts in worker-ID order. Run work on it with [InBundle] on
// [SlicePlacementGroup.PlacementGroup], or with [RunOnSlice].
//
// Always Release it (defer spg.Release(ctx)); a reservation that becomes
// unreachable is released by a cleanup as a last resort. A
// *SlicePlacementGroup is safe for concurrent use.
type SlicePlacementGroup struct {
	c     *Cluster
	spec  SliceSpec
	shape tpu.SliceShape
	res   *backend.SliceReservation
	pg    *PlacementGroup

	mu       sync.Mutex
	released bool
	cleanup  runtime.Cleanup
}

// NewSlicePlacementGroup reserves whole TPU slices. It blocks until the
// slices are reserved, or fails:
//
//   - InvalidArgument for a generation or topology that does not exist
//     (the message lists the valid topologies of the generation), or bad
//     bundle resources;
//   - Infeasible at once when the cluster has fewer slices of that shape
//     than asked, naming the shapes it has;
//   - DeadlineExceeded (or Canceled) when the slices stay busy past ctx's
//     deadline or spec.Timeout: the error wraps ctx.Err(), so errors.Is(err,
//     context.DeadlineExceeded) holds, and says the shape, how many slices
//     were asked for, and how many of that shape were free, busy and
//     broken; nothing is held afterwards.
//
// It never returns a partial reservation.
func NewSlicePlacementGroup(ctx context.Context, c *Cluster, spec SliceSpec) (*SlicePlacementGroup, error) {
	op := backend.ReserveSlicesOp(spec.Name)
	if err := c.check(op); err != nil {
		return nil, err
	}
	req := &backend.SliceRequest{
		Generation: spec.AcceleratorVersion, Topology: spec.Topology, ChipsPerHost: spec.ChipsPerVM,
		NumSlices: spec.NumSlices, BundleResources: backend.Resources(maps.Clone(spec.ResourcesPerBundle)), Name: spec.Name,
	}
	rr, err := req.Resolve(op, nil)
	if err != nil {
		return nil, err
	}
	shape := rr.Shape
	req.Generation, req.Topology = shape.Generation.String(), shape.Topology.String()
	sr, ok := c.b.(backend.SliceReserver)
	if !ok {
		return nil, backend.Errorf(backend.Unimplemented, op, "backend %T does not manage TPU slices", c.b)
	}
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	res, err := sr.ReserveSlices(ctx, req)
	if err != nil {
		return nil, err
	}
	if spec.NumSlices == 0 {
		spec.NumSlices = 1
	}
	s := &SlicePlacementGroup{c: c, spec: spec, shape: shape, res: res}
	s.pg = &PlacementGroup{c: c, id: res.Group, spec: PlacementGroupSpec{Name: spec.Name, Strategy: StrictSpread, Bundles: make([]Bundle, len(res.Env))}}
	br := Resources(res.BundleResources.Clone())
	for i := range s.pg.spec.Bundles {
		s.pg.spec.Bundles[i] = Bundle{Resources: br, Env: res.Env[i]}
	}
	s.cleanup = runtime.AddCleanup(s, func(a releaseArg) {
		a.log.Warn("goray: TPU slice reservation was not released; releasing it now", "group", a.id)
		a.b.RemovePlacementGroup(context.Background(), a.id)
	}, releaseArg{b: c.b, id: res.Group, log: c.log})
	return s, nil
}

type releaseArg struct {
	b   backend.Backend
	id  backend.PlacementGroupID
	log *slog.Logger
}

// Release gives the slices back. Work still running on them is stopped as
// for [PlacementGroup.Remove]. Release is idempotent and safe to defer.
func (s *SlicePlacementGroup) Release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	s.released = true
	s.cleanup.Stop()
	if s.c.closed.Load() {
		return nil // the backend released everything when it closed
	}
	return s.c.b.RemovePlacementGroup(ctx, s.res.Group)
}

// PlacementGroup returns the placement group of the reservation's bundles,
// for [InBundle]. Bundle i*BundlesPerHost() runs on host i (see Hosts).
func (s *SlicePlacementGroup) PlacementGroup() *PlacementGroup { return s.pg }

// Shape returns the slices' shape.
func (s *SlicePlacementGroup) Shape() tpu.SliceShape { return s.shape }

// Topology returns the topology of each slice, such as "4x4".
func (s *SlicePlacementGroup) Topology() string { return s.shape.Topology.String() }

// AcceleratorVersion returns the generation, such as "v6e".
func (s *SlicePlacementGroup) AcceleratorVersion() string { return s.shape.Generation.String() }

// NumSlices returns the number of slices reserved.
func (s *SlicePlacementGroup) NumSlices() int { return len(s.res.Slices) }

// ChipsPerHost returns the physical chips of each host.
func (s *SlicePlacementGroup) ChipsPerHost() int { return s.res.ChipsPerHost }

// NumHosts returns the hosts of all slices.
func (s *SlicePlacementGroup) NumHosts() int { return len(s.res.Env) / s.res.BundlesPerHost }

// NumBundles returns the number of bundles.
func (s *SlicePlacementGroup) NumBundles() int { return len(s.res.Env) }

// BundlesPerHost returns the bundles on each host.
func (s *SlicePlacementGroup) BundlesPerHost() int { return s.res.BundlesPerHost }

// BundleResources returns a copy of one bundle's resources.
func (s *SlicePlacementGroup) BundleResources() Resources {
	return Resources(s.res.BundleResources.Clone())
}

// SliceNames returns the reserved slices' names in MEGASCALE_SLICE_ID order.
func (s *SlicePlacementGroup) SliceNames() []string {
	out := make([]string, len(s.res.Slices))
	for i, sl := range s.res.Slices {
		out[i] = sl.Name
	}
	return out
}

// Hosts returns every reserved host (node name), slice by slice, each slice
// in worker-ID order: host i of the result runs bundle i*BundlesPerHost().
func (s *SlicePlacementGroup) Hosts() []string {
	var out []string
	for _, sl := range s.res.Slices {
		out = append(out, sl.Hosts...)
	}
	return out
}

// WorkerEnv returns a copy of the env of host i (in [Hosts] order):
// TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME, TPU_TOPOLOGY,
// TPU_ACCELERATOR_TYPE, TPU_HOST_BOUNDS, TPU_CHIPS_PER_HOST_BOUNDS, and for
// multislice MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_PORT,
// MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID. It is computed from this
// reservation, never from state a previous job left behind.
func (s *SlicePlacementGroup) WorkerEnv(i int) map[string]string {
	if i < 0 || i >= s.NumHosts() {
		return nil
	}
	return maps.Clone(s.res.Env[i*s.res.BundlesPerHost])
}

// RunOnSlice runs task once per host of the reservation, in the host's first
// bundle, with no resources of its own (it uses the bundle's), and returns
// the outputs in host order (slice by slice, worker-ID order), like Ray's
// ray.util.tpu dispatch. Inside the task, [Runtime] reports the host's
// worker env. The first error (in host order) is returned.
func RunOnSlice[I, O any](ctx context.Context, s *SlicePlacementGroup, task *Task[I, O], in I) ([]O, error) {
	refs := make([]ObjectRef[O], s.NumHosts())
	for i := range refs {
		refs[i] = task.Remote(ctx, s.c, in, InBundle(s.pg, i*s.res.BundlesPerHost), Resources{CPU: 0})
	}
	hosts := s.Hosts()
	out := make([]O, len(refs))
	for i, r := range refs {
		v, err := r.Get(ctx)
		if err == context.Canceled || err == context.DeadlineExceeded {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("run task %s on TPU slices: host %d of %d (%s): %w", task.name, i, len(refs), hosts[i], err)
		}
		out[i] = v
	}
	return out, nil
}

// Dispatch reserves slices per spec, runs task once per host with
// [RunOnSlice], and releases the slices on every path.
func Dispatch[I, O any](ctx context.Context, c *Cluster, spec SliceSpec, task *Task[I, O], in I) ([]O, error) {
	s, err := NewSlicePlacementGroup(ctx, c, spec)
	if err != nil {
		return nil, err
	}
	defer s.Release(context.WithoutCancel(ctx))
	return RunOnSlice(ctx, s, task, in)
}

// TPUSlices returns the state of every TPU slice of the cluster.
func TPUSlices(ctx context.Context, c *Cluster) ([]backend.SliceState, error) {
	const op = backend.ListSlicesOp
	if err := c.check(op); err != nil {
		return nil, err
	}
	sr, ok := c.b.(backend.SliceReserver)
	if !ok {
		return nil, backend.Errorf(backend.Unimplemented, op, "backend %T does not manage TPU slices", c.b)
	}
	return sr.Slices(ctx)
}

// PendingSliceRequests returns the slice reservations that are waiting for
// slices, shape by shape, each shape's in the order they will be served.
// Every backend that reserves slices reports them.
func PendingSliceRequests(ctx context.Context, c *Cluster) ([]backend.PendingSliceRequest, error) {
	const op = backend.ListPendingSlicesOp
	if err := c.check(op); err != nil {
		return nil, err
	}
	sr, ok := c.b.(backend.SliceReserver)
	if !ok {
		return nil, backend.Errorf(backend.Unimplemented, op, "backend %T does not manage TPU slices", c.b)
	}
	return sr.PendingSliceRequests(ctx)
}

// SliceSummary counts the slices of one shape, like Ray's
// get_num_tpu_slices (Intact) and get_num_ready_tpu_slices (Free).
type SliceSummary struct {
	Generation, Topology string
	ChipsPerHost         int
	// Total slices; Intact ones have every host alive; Free ones are intact,
	// unreserved and idle; Reserved ones are held by a reservation.
	Total, Intact, Free, Reserved int
}

// SummarizeSlices counts slices per generation and topology, in the order
// shapes first appear.
func SummarizeSlices(states []backend.SliceState) []SliceSummary {
	var out []SliceSummary
	for _, st := range states {
		i := slices.IndexFunc(out, func(s SliceSummary) bool {
			return s.Generation == st.Generation && s.Topology == st.Topology && s.ChipsPerHost == st.ChipsPerHost
		})
		if i < 0 {
			out = append(out, SliceSummary{Generation: st.Generation, Topology: st.Topology, ChipsPerHost: st.ChipsPerHost})
			i = len(out) - 1
		}
		s := &out[i]
		s.Total++
		if st.Intact {
			s.Intact++
		}
		if st.Idle {
			s.Free++
		}
		if st.ReservedBy != 0 {
			s.Reserved++
		}
	}
	return out
}
