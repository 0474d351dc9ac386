package backend

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/goray-dev/goray/tpu"
)

// SliceRequest asks for NumSlices whole TPU slices of one shape, reserved
// atomically: every host of every slice, or nothing.
type SliceRequest struct {
	// Shape is the shape of each slice, parsed once by the caller
	// (tpu.NewSliceShape): the generation (Ray's accelerator_version), the
	// chip topology, and the chips per host (Ray's chips_per_vm; 0 means
	// the generation's default for the topology, and the override matters
	// for ambiguous shapes such as v6e 2x4). Resolve validates it without
	// parsing anything.
	Shape tpu.SliceShape
	// NumSlices is how many slices; 0 means 1.
	NumSlices int
	// BundleResources are the resources of one bundle. Nil means one
	// bundle per host of {CPU: 1, TPU: chips per host}. Otherwise CPU
	// defaults to 1 and TPU to chips per host, and the host's chips must
	// divide evenly into bundles (Ray: {TPU: 1} on v6e 4x4 is 16 bundles).
	BundleResources Resources
	// Name names the reservation's placement group.
	Name string
	// Subslice, when set, reserves one ICI-contiguous sub-slice of this
	// topology, such as "4x4", inside a slice of Topology, as Ray's
	// subslice_placement_group does (tpu.NewSubslice says which
	// topologies are sub-slices). NumSlices must then be 0 or 1. The
	// bundles' env is rewritten to the sub-slice as the GKE device plugin
	// rewrites a sub-slice pod's: TPU_TOPOLOGY, TPU_ACCELERATOR_TYPE and
	// the bounds are the sub-slice's.
	Subslice string
}

// SliceReservation is a granted SliceRequest.
type SliceReservation struct {
	// Group is the placement group holding every bundle. Bundles are
	// ordered slice by slice, host by host in worker-ID order, and
	// BundlesPerHost bundles per host. Removing the group releases the
	// slices.
	Group PlacementGroupID
	// Slices are the reserved slices, in MEGASCALE_SLICE_ID order.
	Slices []ReservedSlice
	// ChipsPerHost is the resolved chips per host.
	ChipsPerHost int
	// BundlesPerHost is the number of bundles on each host.
	BundlesPerHost int
	// BundleResources are the resolved resources of each bundle.
	BundleResources Resources
	// Env is the env of each bundle (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES,
	// TPU_NAME, and MEGASCALE_* for multislice), indexed like the group's
	// bundles, derived from this reservation.
	Env []map[string]string
}

// ReservedSlice is one slice of a reservation.
type ReservedSlice struct {
	// Name is the slice's name (its GKE node pool).
	Name string
	// Hosts are the slice's node names in worker-ID order.
	Hosts []string
	// Hostnames are the names workers reach each other by, in worker-ID
	// order (TPU_WORKER_HOSTNAMES).
	Hostnames []string
	// Subslice is the sub-slice topology for a sub-slice reservation, ""
	// otherwise; Hosts and Hostnames are then the sub-slice's hosts.
	Subslice string
	// SubsliceIndex is the sub-slice's index in the slice (x-fastest, as
	// tpu.Subslice.Workers numbers them) and SubsliceID its GKE sub-slice
	// label value.
	SubsliceIndex int
	SubsliceID    string
}

// The operations of SliceReserver, as every layer names them in errors.
const (
	// ListSlicesOp names listing a cluster's slices.
	ListSlicesOp = "list TPU slices"
	// ListPendingSlicesOp names listing the slice requests that wait.
	ListPendingSlicesOp = "list pending TPU slice requests"
)

// ReserveSlicesOp names the reservation of slices for errors: "reserve TPU
// slices", followed by the request's name when it has one.
func ReserveSlicesOp(name string) string {
	if name == "" {
		return "reserve TPU slices"
	}
	return "reserve TPU slices " + strconv.Quote(name)
}

// SliceReserver is implemented by backends that manage TPU slices.
type SliceReserver interface {
	// ReserveSlices reserves whole, intact, idle slices atomically. It
	// fails at once with InvalidArgument for a topology the generation
	// does not have, and with Infeasible when the cluster has fewer slices
	// of the shape than asked, naming the shapes it has; otherwise it waits
	// (first come, first served per shape) until enough slices are free, or
	// ctx ends, holding nothing. A request that was waiting when ctx ended
	// fails with an error of code DeadlineExceeded (or Canceled) that wraps
	// ctx.Err() and says the shape, how many slices were asked for, and how
	// many of that shape were free, busy and broken ("2 × v6e 4x4 ... 1
	// free, 1 busy, 0 broken"); a ctx already done returns ctx.Err() as is.
	// With req.Subslice it reserves one idle sub-slice of a slice of the
	// shape instead; a backend without sub-slices fails with Unimplemented.
	// Release a reservation with RemovePlacementGroup(Group).
	ReserveSlices(ctx context.Context, req *SliceRequest) (*SliceReservation, error)
	// Slices reports every TPU slice of the cluster.
	Slices(ctx context.Context) ([]SliceState, error)
	// PendingSliceRequests reports the ReserveSlices calls that are
	// waiting, shape by shape, each shape's in the order they will be
	// served.
	PendingSliceRequests(ctx context.Context) ([]PendingSliceRequest, error)
}

// PendingSliceRequest is a ReserveSlices call still waiting for slices.
type PendingSliceRequest struct {
	// Name is the request's name ("" when it has none).
	Name string
	// Generation, Topology and ChipsPerHost are the resolved shape.
	Generation, Topology string
	ChipsPerHost         int
	// NumSlices is how many slices it asks for.
	NumSlices int
	// Since is when it started waiting.
	Since time.Time
}

// SliceState describes one TPU slice.
type SliceState struct {
	Name         string
	Generation   string
	Topology     string
	ChipsPerHost int
	// Hosts are the slice's hosts in worker-ID order.
	Hosts []SliceHostState
	// Intact: every host is alive.
	Intact bool
	// Idle: intact, unreserved, and nothing runs on any host.
	Idle bool
	// ReservedBy is the placement group holding the slice, or 0.
	ReservedBy PlacementGroupID
	// ReservedName is that group's name.
	ReservedName string
	// Subslices are the slice's reserved sub-slices.
	Subslices []SubsliceState
}

// SubsliceState describes one reserved sub-slice of a slice.
type SubsliceState struct {
	// Topology is the sub-slice topology, Index its index in the slice,
	// ID its GKE sub-slice label value.
	Topology string
	Index    int
	ID       string
	// Hosts are its hosts in the sub-slice's worker-ID order.
	Hosts []string
	// ReservedBy is the placement group holding it.
	ReservedBy PlacementGroupID
}

// SliceHostState describes one host of a slice.
type SliceHostState struct {
	Node  string
	Alive bool
	// Chips is the host's chip count; ChipsInUse how many are held.
	Chips, ChipsInUse int
}

// SliceBundles resolves a SliceRequest's BundleResources for a shape, as
// Ray's slice_placement_group does: nil means one bundle per host of {CPU:
// 1, TPU: chips per host}; otherwise CPU defaults to 1 and TPU to the chips
// per host, and the host's chips must divide evenly into bundles. It
// returns the bundle resources and the bundles per host.
func SliceBundles(shape tpu.SliceShape, r Resources) (Resources, int, error) {
	chips := float64(shape.ChipsPerHost)
	if r == nil {
		return Resources{CPU: 1, TPU: chips}, 1, nil
	}
	if err := r.Validate(); err != nil {
		return nil, 0, Cause(err)
	}
	res := r.Clone()
	if _, ok := res[CPU]; !ok {
		res[CPU] = 1
	}
	if _, ok := res[TPU]; !ok {
		res[TPU] = chips
	}
	t := res[TPU]
	if t <= 0 || t > chips {
		return nil, 0, fmt.Errorf("bundle TPU %v must be in (0, %v], the chips of one %s host", t, chips, shape)
	}
	per := chips / t
	if per != float64(int(per)) {
		return nil, 0, fmt.Errorf("a %s host's %v chips do not divide into bundles of %v TPU", shape, chips, t)
	}
	return res, int(per), nil
}

// ResolvedSliceRequest is a validated SliceRequest.
type ResolvedSliceRequest struct {
	Shape           tpu.SliceShape
	NumSlices       int
	BundleResources Resources
	BundlesPerHost  int
	// Subslice is the requested sub-slice of Shape, or the zero value.
	Subslice tpu.Subslice
}

// Resolve validates the request and fills in its defaults, failing with
// InvalidArgument (op names the operation) for a missing or invalid shape
// (tpu.SliceShape.Validate: an unknown generation, a topology the generation
// lacks, chips per host no machine has), a negative slice count, bundle
// resources that do not divide a host, or a sub-slice that is not one of
// the topology's (the message lists them). The resolved shape has its
// chips per host filled in.
func (r *SliceRequest) Resolve(op string) (ResolvedSliceRequest, error) {
	shape := r.Shape
	if shape == (tpu.SliceShape{}) {
		return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "no slice shape: set SliceRequest.Shape, such as tpu.NewSliceShape(tpu.V6e, \"4x4\", 0) returns")
	}
	if err := shape.Validate(); err != nil {
		return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "%w", err)
	}
	if shape.ChipsPerHost == 0 {
		shape.ChipsPerHost = shape.Generation.DefaultChipsPerHost(shape.Topology)
	}
	n := r.NumSlices
	if n == 0 {
		n = 1
	}
	if n < 0 {
		return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "negative number of slices %d", n)
	}
	res, perHost, err := SliceBundles(shape, r.BundleResources)
	if err != nil {
		return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "%v", err)
	}
	rr := ResolvedSliceRequest{Shape: shape, NumSlices: n, BundleResources: res, BundlesPerHost: perHost}
	if r.Subslice != "" {
		if n != 1 {
			return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "a sub-slice request reserves one sub-slice; NumSlices is %d", n)
		}
		if rr.Subslice, err = tpu.NewSubslice(shape, r.Subslice); err != nil {
			return ResolvedSliceRequest{}, Errorf(InvalidArgument, op, "%w", err)
		}
	}
	return rr, nil
}

// SliceBundleEnv returns the env of bundle j (0..perHost-1) on worker
// (host) worker of a reserved slice, as GKE would give the process that
// bundle stands for:
//
//   - one bundle per host: tpu.WorkerEnv, the whole host;
//   - a v7x host split into its processes (perHost ==
//     shape.ProcessesPerHost()): tpu.ProcessEnv for process j, with its
//     own TPU_WORKER_ID, TPU_PROCESS_PORT and visible chips;
//   - otherwise a partial host: tpu.WorkerEnv plus tpu.PartialHostEnv for
//     chips j·k … j·k+k-1 (k = chips per host / perHost), Ray's
//     TPU_VISIBLE_CHIPS and bounds; bundles of a fraction of a chip get
//     the host env alone.
//
// numSlices > 1 adds MEGASCALE_* for slice sliceID with the given
// coordinator host (tpu.MultisliceProcessEnv for v7x processes). The
// caller owns the returned map.
func SliceBundleEnv(shape tpu.SliceShape, sliceName string, hostnames []string, worker, j, perHost int, coordinator string, numSlices, sliceID int) (map[string]string, error) {
	var env map[string]string
	var err error
	processes := perHost > 1 && perHost == shape.ProcessesPerHost()
	if processes {
		env, err = tpu.ProcessEnv(shape, sliceName, hostnames, worker, j)
	} else {
		env, err = tpu.WorkerEnv(shape, sliceName, hostnames, worker)
	}
	if err != nil {
		return nil, err
	}
	if k := shape.ChipsPerHost / max(1, perHost); !processes && perHost > 1 && k >= 1 {
		chips := make([]int, k)
		for i := range chips {
			chips[i] = j*k + i
		}
		partial, err := tpu.PartialHostEnv(shape, chips)
		if err != nil {
			return nil, err
		}
		maps.Copy(env, partial)
	}
	if numSlices > 1 {
		var ms map[string]string
		if processes {
			ms, err = tpu.MultisliceProcessEnv(coordinator, numSlices, sliceID, j)
		} else {
			ms, err = tpu.MultisliceEnv(coordinator, tpu.DefaultMegascalePort, numSlices, sliceID)
		}
		if err != nil {
			return nil, err
		}
		maps.Copy(env, ms)
	}
	return env, nil
}
