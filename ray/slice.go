package ray

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

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
	// A negative Timeout is refused (InvalidArgument).
	Timeout time.Duration
	// Subslice, when set, reserves one ICI-contiguous sub-slice of this
	// topology inside one slice of Topology instead of whole slices, as
	// Ray's subslice_placement_group does: "4x4" of a v6e 8x8 node pool
	// whose hosts carry GKE's sub-slice labels. The reservation's hosts,
	// env (a slice of its own: the sub-slice's worker IDs and topology)
	// and bundles are the sub-slice's; NumSlices must be 0 or 1.
	Subslice string
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

	mu       sync.Mutex // guards the fields below
	res      *backend.SliceReservation
	pg       *PlacementGroup
	released bool
	cleanup  runtime.Cleanup
}

// NewSlicePlacementGroup reserves whole TPU slices. It blocks until the
// slices are reserved, or fails:
//
//   - InvalidArgument for a generation or topology that does not exist
//     (the message lists the valid topologies of the generation), bad
//     bundle resources, or a negative Timeout;
//   - Infeasible at once when the cluster has fewer slices of that shape
//     than asked, naming the shapes it has;
//   - DeadlineExceeded (or Canceled) when the slices stay busy past ctx's
//     deadline or spec.Timeout: the error wraps ctx.Err(), so errors.Is(err,
//     context.DeadlineExceeded) holds, and says the shape, how many slices
//     were asked for, and how many of that shape were free, busy and
//     broken; nothing is held afterwards.
//
// It never returns a partial reservation.
//
// When a host of the reservation dies, every task and actor in its bundles
// fails at once with Unavailable naming the host, work submitted to it
// later fails the same way (also after Release), and the reservation stays
// broken: release it and reserve again (RunOnSlice and Dispatch do so with
// [Retries]). A slice with a dead host is not reserved again until all its
// hosts are back.
func NewSlicePlacementGroup(ctx context.Context, c *Cluster, spec SliceSpec) (*SlicePlacementGroup, error) {
	op := backend.ReserveSlicesOp(spec.Name)
	if err := c.checkCtx(ctx, op); err != nil {
		return nil, err
	}
	if spec.Timeout < 0 {
		return nil, backend.Errorf(backend.InvalidArgument, op, "SliceSpec.Timeout is %v: it must be 0 (wait as long as ctx) or positive (the longest wait for free slices)", spec.Timeout)
	}
	parsed, err := tpu.NewSliceShape(tpu.Generation(spec.AcceleratorVersion), spec.Topology, spec.ChipsPerVM)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "%w", err)
	}
	req := &backend.SliceRequest{
		Shape: parsed, NumSlices: spec.NumSlices, BundleResources: backend.Resources(maps.Clone(spec.ResourcesPerBundle)), Name: spec.Name,
		Subslice: spec.Subslice,
	}
	rr, err := req.Resolve(op)
	if err != nil {
		return nil, err
	}
	shape := rr.Shape
	if _, ok := c.b.(backend.SliceReserver); !ok {
		return nil, backend.Errorf(backend.Unimplemented, op, "backend %T does not manage TPU slices", c.b)
	}
	s := &SlicePlacementGroup{c: c, spec: spec, shape: shape}
	res, err := s.reserve(ctx)
	if err != nil {
		return nil, err
	}
	if s.spec.NumSlices == 0 {
		s.spec.NumSlices = 1
	}
	s.adopt(res)
	return s, nil
}

// reserve asks the backend for a reservation of s's spec.
func (s *SlicePlacementGroup) reserve(ctx context.Context) (*backend.SliceReservation, error) {
	spec := s.spec
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}
	return s.c.b.(backend.SliceReserver).ReserveSlices(ctx, &backend.SliceRequest{
		Shape: s.shape, NumSlices: spec.NumSlices, BundleResources: backend.Resources(maps.Clone(spec.ResourcesPerBundle)), Name: spec.Name,
		Subslice: spec.Subslice,
	})
}

// adopt makes res the current reservation, with a cleanup that releases it
// if s becomes unreachable. s.mu must be held (or s not yet shared).
func (s *SlicePlacementGroup) adopt(res *backend.SliceReservation) {
	s.res = res
	pg := &PlacementGroup{c: s.c, id: res.Group, spec: PlacementGroupSpec{Name: s.spec.Name, Strategy: StrictSpread, Bundles: make([]Bundle, len(res.Env))}}
	br := Resources(res.BundleResources.Clone())
	for i := range pg.spec.Bundles {
		pg.spec.Bundles[i] = Bundle{Resources: br, Env: res.Env[i]}
	}
	s.pg = pg
	s.cleanup = runtime.AddCleanup(s, func(a releaseArg) { a.r.release(a.id) }, releaseArg{r: s.c.reap, id: res.Group})
}

// current returns the current reservation and its placement group.
func (s *SlicePlacementGroup) current() (*backend.SliceReservation, *PlacementGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.pg
}

// renew releases the current reservation and reserves afresh with the
// same spec. If the new reservation fails, s is left released.
func (s *SlicePlacementGroup) renew(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return backend.Errorf(backend.FailedPrecondition, "use slice placement group", "reservation already released")
	}
	s.cleanup.Stop()
	if err := s.c.b.RemovePlacementGroup(context.WithoutCancel(ctx), s.res.Group); err != nil {
		s.released = true
		return err
	}
	res, err := s.reserve(ctx)
	if err != nil {
		s.released = true
		return err
	}
	s.adopt(res)
	return nil
}

type releaseArg struct {
	r  *reaper
	id backend.PlacementGroupID
}

// Release gives the slices back. Work still running on them is stopped as
// for [PlacementGroup.Remove]. Release is idempotent and safe to defer.
// After a host of the reservation died, work pinned to it keeps failing
// with the Unavailable error naming that host, not with a removal error.
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
func (s *SlicePlacementGroup) PlacementGroup() *PlacementGroup {
	_, pg := s.current()
	return pg
}

// Shape returns the slices' shape.
func (s *SlicePlacementGroup) Shape() tpu.SliceShape { return s.shape }

// Topology returns the topology of each slice, such as "4x4".
func (s *SlicePlacementGroup) Topology() string { return s.shape.Topology.String() }

// AcceleratorVersion returns the generation, such as "v6e".
func (s *SlicePlacementGroup) AcceleratorVersion() string { return s.shape.Generation.String() }

// NumSlices returns the number of slices reserved.
func (s *SlicePlacementGroup) NumSlices() int {
	res, _ := s.current()
	return len(res.Slices)
}

// ChipsPerHost returns the physical chips of each host.
func (s *SlicePlacementGroup) ChipsPerHost() int {
	res, _ := s.current()
	return res.ChipsPerHost
}

// NumHosts returns the hosts of all slices.
func (s *SlicePlacementGroup) NumHosts() int {
	res, _ := s.current()
	return len(res.Env) / res.BundlesPerHost
}

// NumBundles returns the number of bundles.
func (s *SlicePlacementGroup) NumBundles() int {
	res, _ := s.current()
	return len(res.Env)
}

// BundlesPerHost returns the bundles on each host.
func (s *SlicePlacementGroup) BundlesPerHost() int {
	res, _ := s.current()
	return res.BundlesPerHost
}

// BundleResources returns a copy of one bundle's resources.
func (s *SlicePlacementGroup) BundleResources() Resources {
	res, _ := s.current()
	return Resources(res.BundleResources.Clone())
}

// SliceNames returns the reserved slices' names in MEGASCALE_SLICE_ID order.
func (s *SlicePlacementGroup) SliceNames() []string {
	res, _ := s.current()
	out := make([]string, len(res.Slices))
	for i, sl := range res.Slices {
		out[i] = sl.Name
	}
	return out
}

// Slices returns the reserved slices (copies), in MEGASCALE_SLICE_ID
// order: each one's name, hosts and hostnames, and for a sub-slice
// reservation the sub-slice's topology, index and GKE sub-slice ID.
func (s *SlicePlacementGroup) Slices() []ReservedSlice {
	res, _ := s.current()
	out := make([]ReservedSlice, len(res.Slices))
	for i, sl := range res.Slices {
		sl.Hosts, sl.Hostnames = slices.Clone(sl.Hosts), slices.Clone(sl.Hostnames)
		out[i] = sl
	}
	return out
}

// Hosts returns every reserved host (node name), slice by slice, each slice
// in worker-ID order: host i of the result runs bundle i*BundlesPerHost().
func (s *SlicePlacementGroup) Hosts() []string {
	res, _ := s.current()
	var out []string
	for _, sl := range res.Slices {
		out = append(out, sl.Hosts...)
	}
	return out
}

// ProcessesPerHost returns how many processes of one TPU job each host
// runs: the bundles per host when they are the shape's TPU processes
// (tpu.SliceShape.ProcessesPerHost: a v7x host reserved with
// ResourcesPerBundle {TPU: 2} runs two NUMA-aligned processes, each with
// its own TPU_WORKER_ID and TPU_PROCESS_PORT), otherwise 1 (one process
// per host; further bundles of a host hold parts of it for other work).
func (s *SlicePlacementGroup) ProcessesPerHost() int {
	res, _ := s.current()
	return processesPerHost(s.shape, res)
}

func processesPerHost(shape tpu.SliceShape, res *backend.SliceReservation) int {
	if res.BundlesPerHost > 1 && res.BundlesPerHost == shape.ProcessesPerHost() {
		return res.BundlesPerHost
	}
	return 1
}

// NumProcesses returns the processes of the TPU job the reservation runs:
// NumHosts × ProcessesPerHost, the process count JAX derives from the
// env (TPU_PROCESS_ADDRESSES or TPU_WORKER_HOSTNAMES, times the slices).
// RunOnSlice starts that many tasks.
func (s *SlicePlacementGroup) NumProcesses() int {
	res, _ := s.current()
	return len(res.Env) / res.BundlesPerHost * processesPerHost(s.shape, res)
}

// processBundle returns the bundle of process i: process j of host h
// runs in bundle h*BundlesPerHost + j.
func processBundle(res *backend.SliceReservation, pph, i int) int {
	return i/pph*res.BundlesPerHost + i%pph
}

// WorkerEnv returns a copy of the env of process i, in process order
// (slice by slice, host by host, the processes of a host in turn; with
// one process per host, process i is host i of [Hosts]): TPU_WORKER_ID,
// TPU_WORKER_HOSTNAMES, TPU_NAME, TPU_TOPOLOGY, TPU_ACCELERATOR_TYPE,
// TPU_HOST_BOUNDS, TPU_CHIPS_PER_HOST_BOUNDS, on v7x TPU_PROCESS_ADDRESSES
// and TPU_PROCESS_PORT, and for multislice MEGASCALE_COORDINATOR_ADDRESS,
// MEGASCALE_PORT, MEGASCALE_NUM_SLICES and MEGASCALE_SLICE_ID. It is
// computed from this reservation, never from state a previous job left
// behind. It returns nil for i outside 0..NumProcesses()-1.
func (s *SlicePlacementGroup) WorkerEnv(i int) map[string]string {
	res, _ := s.current()
	pph := processesPerHost(s.shape, res)
	if i < 0 || i >= len(res.Env)/res.BundlesPerHost*pph {
		return nil
	}
	return maps.Clone(res.Env[processBundle(res, pph, i)])
}

// RunOnSlice runs task once per TPU process of the reservation
// ([SlicePlacementGroup.NumProcesses]: once per host, in the host's first
// bundle, or on a v7x host reserved as two processes once in each of
// them), with no resources of its own (it uses the bundle's), and returns
// the outputs in process order (slice by slice, worker-ID order), like
// Ray's ray.util.tpu dispatch. Inside the task, [Runtime] reports the
// process's worker env, so every process JAX expects starts.
//
// The hosts' work is one gang: it returns the first failure as soon as it
// happens, without waiting for the other hosts, and cancels the other
// hosts' work (on backends that implement backend.TaskCanceler; Dispatch
// also stops it by releasing the slices). When a host of the reservation
// dies the backend fails every host's work at once with Unavailable naming
// the lost host (a slice cannot run with a host missing), so RunOnSlice
// returns that error instead of hanging.
//
// opts are task options. [Resources] and [Name] apply to each host's task;
// [Retries] and [RetryOnError] apply to the gang as a whole: a retry
// releases the broken reservation and re-runs every host's work on a fresh
// one of the same spec (s then describes the new reservation: its Hosts,
// WorkerEnv and PlacementGroup change). The default is no retry; a single
// host's task is never retried alone. Placement options are ignored.
func RunOnSlice[I, O any](ctx context.Context, s *SlicePlacementGroup, task *Task[I, O], in I, opts ...TaskOption) ([]O, error) {
	if task == nil {
		return nil, errNilTask(runOnSliceOp(""))
	}
	op := runOnSliceOp(task.name)
	if s == nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "nil slice placement group: reserve one with ray.NewSlicePlacementGroup, or use ray.Dispatch")
	}
	if err := s.c.checkCtx(ctx, op); err != nil {
		return nil, err
	}
	policy := backend.TaskSpec{}
	for _, o := range opts {
		if o != nil {
			o.applyTask(&policy)
		}
	}
	for attempt := 0; ; attempt++ {
		out, err := runOnSliceOnce(ctx, s, task, in, opts)
		if err == nil || ctx.Err() != nil {
			return out, err
		}
		code := backend.CodeOf(err)
		retryable := code == backend.Unavailable || (policy.RetryOnError && code == backend.TaskFailed)
		if !retryable || (policy.MaxRetries >= 0 && attempt >= policy.MaxRetries) {
			return nil, err
		}
		s.c.log.Debug("goray: re-running slice work on a fresh reservation", "task", task.name, "attempt", attempt+1, "cause", err)
		if rerr := s.renew(ctx); rerr != nil {
			return nil, fmt.Errorf("%s: reserving afresh after %v: %w", runOnSliceOp(task.name), err, rerr)
		}
	}
}

// runOnSliceOp names RunOnSlice's operation in errors.
func runOnSliceOp(task string) string {
	if task == "" {
		return "run task on TPU slices"
	}
	return "run task " + task + " on TPU slices"
}

// runOnSliceOnce runs one attempt of RunOnSlice on the current reservation.
func runOnSliceOnce[I, O any](ctx context.Context, s *SlicePlacementGroup, task *Task[I, O], in I, opts []TaskOption) ([]O, error) {
	res, pg := s.current()
	hostOpts := make([]TaskOption, 0, len(opts)+4)
	hostOpts = append(hostOpts, Resources{CPU: 0})
	hostOpts = append(hostOpts, opts...)
	hostOpts = append(hostOpts, nil, Retries(0), RetryOnError(false)) // nil: the placement, per host
	pph := processesPerHost(s.shape, res)
	n := len(res.Env) / res.BundlesPerHost * pph
	var hosts []string
	for _, sl := range res.Slices {
		hosts = append(hosts, sl.Hosts...)
	}
	where := func(i int) string {
		if pph == 1 {
			return fmt.Sprintf("host %d of %d (%s)", i, n, hosts[i])
		}
		return fmt.Sprintf("process %d of %d (host %s)", i, n, hosts[i/pph])
	}
	refs := make([]ObjectRef[O], n)
	for i := range refs {
		hostOpts[len(hostOpts)-3] = InBundle(pg, processBundle(res, pph, i))
		refs[i] = task.Remote(ctx, s.c, in, hostOpts...)
	}
	defer func() {
		for _, r := range refs {
			r.Release()
		}
	}()
	out := make([]O, n)
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range refs {
		g.Go(func() error {
			v, err := r.Get(gctx)
			if err != nil {
				if err == gctx.Err() && ctx.Err() == nil {
					return nil // another host failed first
				}
				if err == ctx.Err() {
					return err
				}
				return fmt.Errorf("%s: %s: %w", runOnSliceOp(task.name), where(i), err)
			}
			out[i] = v
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		// The gang failed: stop the other hosts' work, which on a real
		// slice would hang in its next collective.
		if tc, ok := s.c.b.(backend.TaskCanceler); ok {
			for _, r := range refs {
				if r.Err() == nil {
					tc.CancelTask(context.WithoutCancel(ctx), r.ID(), backend.CancelOptions{}) //nolint:errcheck // best effort: a finished task is not affected
				}
			}
		}
		return nil, err
	}
	return out, nil
}

// Dispatch reserves slices per spec, runs task once per TPU process with
// [RunOnSlice] (opts as there: [Retries] re-runs every host's work on a
// fresh reservation), and releases the slices on every path; on a failure
// the release stops the other hosts' work.
func Dispatch[I, O any](ctx context.Context, c *Cluster, spec SliceSpec, task *Task[I, O], in I, opts ...TaskOption) ([]O, error) {
	if task == nil {
		return nil, errNilTask(runOnSliceOp(""))
	}
	s, err := NewSlicePlacementGroup(ctx, c, spec)
	if err != nil {
		return nil, err
	}
	defer s.Release(context.WithoutCancel(ctx))
	return RunOnSlice(ctx, s, task, in, opts...)
}

// TPUSlices returns the state of every TPU slice of the cluster.
func TPUSlices(ctx context.Context, c *Cluster) ([]SliceState, error) {
	const op = backend.ListSlicesOp
	if err := c.checkCtx(ctx, op); err != nil {
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
func PendingSliceRequests(ctx context.Context, c *Cluster) ([]PendingSliceRequest, error) {
	const op = backend.ListPendingSlicesOp
	if err := c.checkCtx(ctx, op); err != nil {
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
func SummarizeSlices(states []SliceState) []SliceSummary {
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
