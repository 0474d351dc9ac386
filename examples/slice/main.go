// Command slice reserves TPU slices on the local simulator, the Go form of
// Ray's slice_placement_group(topology="4x4", accelerator_version="v6e"):
// it runs one task per host of a v6e 4x4 slice, printing each worker's ID,
// the slice's hostnames and the host's chips, then reserves two slices at
// once (multislice) and prints the MEGASCALE_* env of each worker. It then
// runs one task per process of a v7x 2x2x2, whose 4-chip hosts run two
// processes of 2 chips each, and reserves a 4x4 sub-slice of a v6e 8x8
// node pool, as Ray's subslice_placement_group does, printing the env the
// GKE device plugin rewrites to the sub-slice.
//
//	go run ./examples/slice
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// WorkerInfo is what each TPU worker reports.
type WorkerInfo struct {
	Host, WorkerID, Hostnames, SliceName, Chips string
	Megascale                                   string
	// Process is the per-process env of a multi-process (v7x) host.
	Process string
}

// Report runs on every host of a reserved slice and reads the TPU worker
// env that the reservation gave it.
var Report = ray.NewTask("slice.report", func(ctx context.Context, _ struct{}) (WorkerInfo, error) {
	rc, _ := ray.Runtime(ctx)
	info := WorkerInfo{
		Host:      rc.NodeName(),
		WorkerID:  rc.Env("TPU_WORKER_ID"),
		Hostnames: rc.Env("TPU_WORKER_HOSTNAMES"),
		SliceName: rc.Env("TPU_NAME"),
		Chips:     rc.NodeLabels()["cloud.google.com/gke-accelerator-count"],
	}
	if port := rc.Env("TPU_PROCESS_PORT"); port != "" {
		info.Process = fmt.Sprintf("TPU_PROCESS_PORT=%s TPU_VISIBLE_CHIPS=%s TPU_HOST_BOUNDS=%s TPU_CHIPS_PER_HOST_BOUNDS=%s",
			port, rc.Env("TPU_VISIBLE_CHIPS"), rc.Env("TPU_HOST_BOUNDS"), rc.Env("TPU_CHIPS_PER_HOST_BOUNDS"))
	}
	if n := rc.Env("MEGASCALE_NUM_SLICES"); n != "" {
		info.Megascale = fmt.Sprintf("MEGASCALE_SLICE_ID=%s MEGASCALE_NUM_SLICES=%s MEGASCALE_COORDINATOR_ADDRESS=%s MEGASCALE_PORT=%s",
			rc.Env("MEGASCALE_SLICE_ID"), n, rc.Env("MEGASCALE_COORDINATOR_ADDRESS"), rc.Env("MEGASCALE_PORT"))
	}
	return info, nil
})

// clusterSpec is three v6e 4x4 slices (4 hosts of 4 chips each), one v5p
// 2x2x2 slice, one v7x 2x2x2 slice (2 hosts of 4 chips, two processes
// each), a v6e 8x8 node pool labelled for 4x4 sub-slices, and four CPU
// nodes.
func clusterSpec() local.ClusterSpec {
	return local.ClusterSpec{
		Nodes: []local.NodeSpec{{Name: "cpu", Count: 4, Resources: ray.Resources{ray.CPU: 16, ray.Memory: 64 << 30}}},
		TPUSlices: []local.TPUSliceSpec{
			{Generation: "v6e", Topology: "4x4", Count: 3},
			{Generation: "v5p", Topology: "2x2x2", Count: 1},
			{Generation: "v7x", Topology: "2x2x2", Count: 1},
			{Generation: "v6e", Topology: "8x8", Count: 1, Subslices: []string{"4x4"}},
		},
	}
}

func main() {
	ray.Main() // serve as a worker when a backend launched this binary as one
	ctx := context.Background()
	b, err := local.New(clusterSpec(), nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := run(ctx, c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c *ray.Cluster, w io.Writer) error {
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprint(w, ray.FormatSliceSummary(ray.SummarizeSlices(states)))

	// One slice: every host of a v6e 4x4, reserved atomically.
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "single"})
	if err != nil {
		return err
	}
	defer spg.Release(ctx)
	fmt.Fprintf(w, "\nreserved %s: %d hosts x %d chips, %d bundles\n", spg.SliceNames()[0], spg.NumHosts(), spg.ChipsPerHost(), spg.NumBundles())
	infos, err := ray.RunOnSlice(ctx, spg, Report, struct{}{})
	if err != nil {
		return err
	}
	for _, in := range infos {
		fmt.Fprintf(w, "  worker %s on %s: %s chips, TPU_NAME=%s\n", in.WorkerID, in.Host, in.Chips, in.SliceName)
	}
	fmt.Fprintf(w, "  TPU_WORKER_HOSTNAMES=%s\n", infos[0].Hostnames)

	// Multislice: two more slices at once, all or nothing.
	multi, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 2, Name: "multi"})
	if err != nil {
		return err
	}
	defer multi.Release(ctx)
	fmt.Fprintf(w, "\nreserved %v: %d hosts\n", multi.SliceNames(), multi.NumHosts())
	infos, err = ray.RunOnSlice(ctx, multi, Report, struct{}{})
	if err != nil {
		return err
	}
	for _, in := range infos {
		fmt.Fprintf(w, "  %s worker %s: %s\n", in.Host, in.WorkerID, in.Megascale)
	}

	states, err = ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s", ray.FormatSlices(states))

	if err := processes(ctx, c, w); err != nil {
		return err
	}
	if err := subslice(ctx, c, w); err != nil {
		return err
	}

	// The errors below are the point of the demo, so they are printed, not
	// returned. A fourth v6e 4x4 does not exist: the request fails at once.
	_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", NumSlices: 4})
	if ray.CodeOf(err) != ray.Infeasible {
		return fmt.Errorf("4 of 3 slices: want an Infeasible error, got %v", err)
	}
	fmt.Fprintf(w, "\nexpected error, asking for 4 slices: %v\n  %v\n", ray.CodeOf(err), err)
	// A topology v6e does not have: the error lists the valid ones.
	_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"})
	if ray.CodeOf(err) != ray.InvalidArgument {
		return fmt.Errorf("v6e 4x5: want an InvalidArgument error, got %v", err)
	}
	fmt.Fprintf(w, "expected error, asking for v6e 4x5: %v\n  %v\n", ray.CodeOf(err), err)
	return nil
}

// processes runs one task per process of a v7x 2x2x2: a bundle of 2 chips
// is one of the two NUMA-aligned processes of a 4-chip host, with its own
// TPU_WORKER_ID, TPU_PROCESS_PORT and chips, as the KubeRay TPU webhook
// and the GKE device plugin set them.
func processes(ctx context.Context, c *ray.Cluster, w io.Writer) error {
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{
		Topology: "2x2x2", AcceleratorVersion: "tpu7x", Name: "v7x",
		ResourcesPerBundle: ray.Resources{ray.TPU: 2},
	})
	if err != nil {
		return err
	}
	defer spg.Release(ctx)
	fmt.Fprintf(w, "\nreserved %s: %d hosts x %d processes\n", spg.SliceNames()[0], spg.NumHosts(), spg.BundlesPerHost())
	// One task per bundle, that is per process (RunOnSlice runs one per host).
	refs := make([]ray.ObjectRef[WorkerInfo], spg.NumBundles())
	for i := range refs {
		refs[i] = Report.Remote(ctx, c, struct{}{}, ray.InBundle(spg.PlacementGroup(), i), ray.Resources{ray.CPU: 0})
	}
	infos, err := ray.GetAll(ctx, refs)
	if err != nil {
		return err
	}
	for _, in := range infos {
		fmt.Fprintf(w, "  %s worker %s: %s\n", in.Host, in.WorkerID, in.Process)
	}
	fmt.Fprintf(w, "  TPU_PROCESS_ADDRESSES=%s\n", spg.WorkerEnv(0)[tpu.EnvProcessAddresses])
	return nil
}

// subslice reserves a 4x4 sub-slice of the v6e 8x8 node pool, as Ray's
// subslice_placement_group does, and prints the env the device plugin
// rewrites to the sub-slice and the GKE sub-slice label of its hosts.
func subslice(ctx context.Context, c *ray.Cluster, w io.Writer) error {
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "8x8", Subslice: "4x4", Name: "sub"})
	if err != nil {
		return err
	}
	defer spg.Release(ctx)
	rs := spg.Slices()[0]
	fmt.Fprintf(w, "\nreserved sub-slice %s %d of %s (%s): %v\n", rs.Subslice, rs.SubsliceIndex, rs.Name, rs.SubsliceID, rs.Hosts)
	for i := range spg.NumHosts() {
		env := spg.WorkerEnv(i)
		fmt.Fprintf(w, "  worker %s on %s: TPU_TOPOLOGY=%s TPU_ACCELERATOR_TYPE=%s TPU_HOST_BOUNDS=%s\n",
			env[tpu.EnvWorkerID], rs.Hosts[i], env[tpu.EnvTopology], env[tpu.EnvAcceleratorType], env[tpu.EnvHostBounds])
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	label := tpu.SubsliceLabel(tpu.V6e, tpu.MustParseTopology(rs.Subslice))
	for _, n := range snap.Nodes {
		if n.Name == rs.Hosts[3] {
			fmt.Fprintf(w, "  %s is labelled %s=%s\n", n.Name, label, n.Labels[label])
		}
	}
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		return err
	}
	for _, st := range states {
		for _, sub := range st.Subslices {
			fmt.Fprintf(w, "  %s holds sub-slice %s %d: %v\n", st.Name, sub.Topology, sub.Index, sub.Hosts)
		}
	}
	return nil
}
