// Package ray is goray's portable API: typed tasks, actors, object refs,
// placement groups and TPU slice reservations, on any backend.
//
// Register remote code by explicit name at package level, with one input
// and one output:
//
//	var Square = ray.NewTask("examples.square", func(ctx context.Context, x int) (int, error) {
//		return x * x, nil
//	})
//
// Open a cluster on a backend and call it:
//
//	b, _ := local.New(local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2, Resources: backend.Resources{"CPU": 4}}}}, nil)
//	c, _ := ray.NewCluster(ctx, b, nil)
//	defer c.Close()
//	ref := Square.Remote(ctx, c, 3)       // ObjectRef[int]
//	v, err := ref.Get(ctx)                // 9, nil
//	sum := Sum.RemoteRef(ctx, c, ref)     // refs feed other tasks
//
// Actors pair a registered constructor with methods typed to the actor's Go
// type, so a method cannot be called on another actor type's handle:
//
//	var Counter = ray.NewActorClass("examples.counter", newCounter)
//	var Add = ray.NewMethod(Counter, "add", (*counter).add)
//	h := Counter.Remote(ctx, c, 0, ray.MaxRestarts(2))
//	n, err := Add.Remote(ctx, h, 5).Get(ctx)
//
// Per-call options are typed values: [Resources], [NodeSelector],
// [Retries], [RetryOnError], [InBundle], [Name]; actors also take
// [MaxRestarts], [MaxConcurrency] and [MaxTaskRetries].
//
// Streaming tasks and methods ([NewStreamTask], [NewStreamMethod]) yield
// values that the caller reads as they are made, like Ray's generator
// tasks, with backpressure ([StreamBuffer]):
//
//	for tok, err := range Generate.Remote(ctx, c, prompt).All(ctx) { ... }
//
// [ObjectRef.Cancel] stops a task or actor call, as ray.cancel; with
// [Force], a task's worker process ends.
//
// Work that asks for a whole number of a TPU host's chips, fewer than
// all, owns those chips: Resources{TPU: 1} on a 4-chip host gets one
// chip of its own and Ray's TPU_VISIBLE_CHIPS for it (with
// TPU_CHIPS_PER_HOST_BOUNDS and TPU_HOST_BOUNDS for 1 or 2 chips; see
// [RuntimeContext.Environ]), so four such actors share the host without
// sharing a chip. A power-of-two count gets an aligned block (2 of 4 are
// chips 0,1 or 2,3), as the GKE device plugin chooses; placement group
// bundles hold chips the same way for the work inside them. Whole hosts
// get no chip variables, as in Ray. On the Kubernetes backend the driver
// first claims the host (its slice's Lease, shared, and one pod that
// requests all of the host's chips, where such work then runs), and
// gives it back once the host has been idle for a moment.
//
// # Backends
//
// A [Cluster] wraps a [Backend]: backend/local simulates a cluster of
// CPU nodes and TPU slices in process, and backend/fake records calls for
// unit tests. Code written against this package runs unchanged on each. A
// program imports this package and one backend package; the types it names
// ([State], [SliceState], [FaultInjector], [SliceRequest], the IDs) are
// re-exported here, so it never imports package backend, which is for
// backend authors. The
// backend for real Kubernetes clusters (GKE TPU node pools) is
// backend/kubernetes, a module of its own.
//
// # Worker processes
//
// Go cannot ship closures, so backends that run work in other processes
// start the program's own binary as a worker. Call [Main] first in main (and
// in TestMain of tests that start workers); outside worker mode it returns
// at once. Package worker holds the protocol.
//
// # Codec
//
// Arguments and results cross the backend as bytes, encoded by the
// cluster's [Codec] ([JSON] by default). The local simulator encodes too, so
// a value that cannot cross a network fails in tests as it would in
// production. Registration ([NewTask], [NewActorClass], [NewMethod])
// refuses, with a panic naming the type and field, input and output types
// that would cross wrong: an unexported struct field (it would arrive as
// its zero value; a field tagged `ray:"-"` is left out on purpose), a
// channel, a function, an error or another non-empty interface, a complex
// number, a map key JSON cannot use; a type implementing json.Marshaler
// and json.Unmarshaler (or the Text pair) is taken as it is.
// [Options].DisableCodec skips encoding on in-process backends, for
// benchmarks.
//
// # Errors
//
// Every error has a code from a closed set, read with [CodeOf]; errors.Is
// matches the sentinel of each code ([ErrInfeasible], [ErrUnavailable],
// [ErrTaskFailed], ...) and the narrower [ErrClosed] and
// [ErrPlacementGroupRemoved]. Errors of package tpu, returned by its
// parsers, have code InvalidArgument. User code that returns an error or panics
// yields a TaskFailed error carrying a *[TaskError] with the task's name,
// the attempt, and for a panic the stack; a panic never crashes the
// process. Context errors are returned as they are, never wrapped, with one
// exception: a TPU slice reservation that waited in vain wraps ctx.Err() in
// an error that says what it waited for (errors.Is still matches).
//
// Submitting calls (Remote, RemoteRef, [Put], actor creation) return refs
// and handles at once; their submission errors are reported by Get, Err,
// Ready and calls on the handle.
//
// # Lifetimes
//
// Objects live while a ref to them is reachable or work depends on them;
// [ObjectRef.Release] frees one earlier. The context passed to Remote
// governs only the submission: submitted work outlives it, as in Ray. Work
// running when its placement group is removed or its cluster closed has its
// context cancelled.
//
// # Names
//
// Where this package mirrors a Ray API it keeps Ray's name; elsewhere
// goray uses one name per concept, the one of package tpu and the GKE docs:
//
//   - generation: Ray's accelerator_version ([SliceSpec].AcceleratorVersion,
//     [SlicePlacementGroup.AcceleratorVersion]) is tpu.Generation and
//     SliceShape.Generation everywhere else ("v6e", "tpu7x").
//   - chips per host: Ray's chips_per_vm ([SliceSpec].ChipsPerVM) is
//     tpu.SliceShape.ChipsPerHost, [SlicePlacementGroup.ChipsPerHost] and
//     SliceRequest.Shape.ChipsPerHost; a host is one VM, one Kubernetes
//     node.
//   - label selector: the labels a node must have. For tasks and actors the
//     option is [NodeSelector], Kubernetes' nodeSelector (Ray's
//     label_selector); for placement-group bundles it is
//     [Bundle].LabelSelector (Ray's bundle_label_selector). Both are
//     [NodeSelector] values, with one syntax.
//
// # Concurrency
//
// Clusters, tasks, refs, handles and placement groups are safe for
// concurrent use.
package ray
