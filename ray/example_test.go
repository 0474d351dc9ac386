package ray_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

// Tasks and actor classes are registered at package level, by name.
var (
	exampleSquare = ray.NewTask("example.square", func(ctx context.Context, x int) (int, error) {
		return x * x, nil
	})
	exampleAddOne = ray.NewTask("example.addOne", func(ctx context.Context, x int) (int, error) {
		return x + 1, nil
	})
	exampleSqrt = ray.NewTask("example.intSqrt", func(ctx context.Context, x int) (int, error) {
		if x < 0 {
			return 0, fmt.Errorf("no square root of %d", x)
		}
		r := 0
		for (r+1)*(r+1) <= x {
			r++
		}
		return r, nil
	})
	exampleWhere = ray.NewTask("example.where", func(ctx context.Context, _ struct{}) (string, error) {
		rc, _ := ray.Runtime(ctx)
		return fmt.Sprintf("bundle %d, %v", rc.BundleIndex(), rc.Resources()), nil
	})
	exampleNode = ray.NewTask("example.node", func(ctx context.Context, _ struct{}) (string, error) {
		rc, _ := ray.Runtime(ctx)
		return rc.NodeName(), nil
	})
	exampleTPUWorker = ray.NewTask("example.tpuWorker", func(ctx context.Context, step int) (string, error) {
		rc, _ := ray.Runtime(ctx)
		return fmt.Sprintf("step %d on %s: TPU_WORKER_ID=%s TPU_NAME=%s", step, rc.NodeName(), rc.Env("TPU_WORKER_ID"), rc.Env("TPU_NAME")), nil
	})

	exampleCounter = ray.NewActorClass("example.counter", func(ctx context.Context, start int) (*exampleCount, error) {
		return &exampleCount{n: start}, nil
	})
	exampleCounterAdd = ray.NewMethod(exampleCounter, "add", func(ctx context.Context, c *exampleCount, d int) (int, error) {
		c.n += d
		return c.n, nil
	})
)

type exampleCount struct{ n int }

// exampleCluster opens a cluster on the in-process simulator.
func exampleCluster(ctx context.Context, spec local.ClusterSpec) *ray.Cluster {
	b, err := local.New(spec, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

var exampleCPUs = local.ClusterSpec{Nodes: []local.NodeSpec{{Name: "cpu", Count: 2, Resources: ray.Resources{ray.CPU: 4}}}}

func ExampleNewTask() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// Remote returns a ref at once; Get waits for the value.
	ref := exampleSquare.Remote(ctx, c, 3)
	v, err := ref.Get(ctx)
	fmt.Println(v, err)

	// Fan out, then gather in order.
	var refs []ray.ObjectRef[int]
	for i := 1; i <= 4; i++ {
		refs = append(refs, exampleSquare.Remote(ctx, c, i))
	}
	all, err := ray.GetAll(ctx, refs)
	fmt.Println(all, err)
	// Output:
	// 9 <nil>
	// [1 4 9 16] <nil>
}

func ExampleTask_RemoteRef() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// The output of one task feeds the next without a round trip through
	// the caller: addOne runs once square's result is ready.
	sq := exampleSquare.Remote(ctx, c, 3)
	next := exampleAddOne.RemoteRef(ctx, c, sq)
	v, err := next.Get(ctx)
	fmt.Println(v, err)

	// A failed input fails the dependent task, which never runs.
	bad := exampleSqrt.Remote(ctx, c, -4)
	_, err = exampleAddOne.RemoteRef(ctx, c, bad).Get(ctx)
	fmt.Println(ray.CodeOf(err))
	fmt.Println(err)
	// Output:
	// 10 <nil>
	// TaskFailed
	// task example.intSqrt failed (attempt 0): no square root of -4
}

func ExampleNewActorClass() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	h := exampleCounter.Remote(ctx, c, 10)
	if err := h.Ready(ctx); err != nil {
		log.Fatal(err)
	}
	n, err := exampleCounterAdd.Remote(ctx, h, 5).Get(ctx)
	fmt.Println(n, err)

	// A killed actor is dead: its calls fail with ActorDied.
	if err := h.Kill(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = exampleCounterAdd.Remote(ctx, h, 1).Get(ctx)
	fmt.Println(ray.CodeOf(err), errors.Is(err, ray.ErrActorDied))
	// Output:
	// 15 <nil>
	// ActorDied true
}

func ExampleNewMethod() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// Calls on one actor run one at a time, in submission order.
	h := exampleCounter.Remote(ctx, c, 0)
	var refs []ray.ObjectRef[int]
	for range 5 {
		refs = append(refs, exampleCounterAdd.Remote(ctx, h, 2))
	}
	totals, err := ray.GetAll(ctx, refs)
	fmt.Println(totals, err)
	fmt.Println(exampleCounterAdd.Name())
	// Output:
	// [2 4 6 8 10] <nil>
	// example.counter.add
}

func ExampleNewPlacementGroup() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// Two bundles of 2 CPUs, on different nodes, reserved together.
	pg, err := ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{
		Name:     "pair",
		Strategy: ray.StrictSpread,
		Bundles: []ray.Bundle{
			{Resources: ray.Resources{ray.CPU: 2}},
			{Resources: ray.Resources{ray.CPU: 2}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := pg.Ready(ctx); err != nil {
		log.Fatal(err)
	}
	defer pg.Remove(ctx)

	for i := range pg.NumBundles() {
		s, err := exampleWhere.Remote(ctx, c, struct{}{}, ray.InBundle(pg, i)).Get(ctx)
		fmt.Println(s, err)
	}
	a, _ := exampleNode.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 0)).Get(ctx)
	b, _ := exampleNode.Remote(ctx, c, struct{}{}, ray.InBundle(pg, 1)).Get(ctx)
	fmt.Println("bundles on different nodes:", a != b)

	// A third STRICT_SPREAD bundle could never be placed on two nodes.
	_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{
		Strategy: ray.StrictSpread,
		Bundles:  []ray.Bundle{{Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 1}}, {Resources: ray.Resources{ray.CPU: 1}}},
	})
	fmt.Println(ray.CodeOf(err))
	// Output:
	// bundle 0, {CPU: 1} <nil>
	// bundle 1, {CPU: 1} <nil>
	// bundles on different nodes: true
	// Infeasible
}

var exampleSlices = local.ClusterSpec{
	Nodes:     []local.NodeSpec{{Name: "head", Resources: ray.Resources{ray.CPU: 4}}},
	TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4"}},
}

func ExampleNewSlicePlacementGroup() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleSlices)
	defer c.Close()

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "train"})
	if err != nil {
		log.Fatal(err)
	}
	defer spg.Release(ctx)

	fmt.Println(spg.AcceleratorVersion(), spg.Topology(), "slices:", spg.SliceNames())
	fmt.Println("hosts:", spg.NumHosts(), "chips per host:", spg.ChipsPerHost(), "bundle:", spg.BundleResources())
	fmt.Println(spg.Hosts())
	env := spg.WorkerEnv(2)
	fmt.Println(env["TPU_WORKER_ID"], env["TPU_WORKER_HOSTNAMES"])

	// RunOnSlice runs one task per host, results in worker-ID order.
	outs, err := ray.RunOnSlice(ctx, spg, exampleTPUWorker, 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range outs {
		fmt.Println(o)
	}
	// Output:
	// v6e 4x4 slices: [v6e-16-0]
	// hosts: 4 chips per host: 4 bundle: {CPU: 1, TPU: 4}
	// [v6e-16-0-w0 v6e-16-0-w1 v6e-16-0-w2 v6e-16-0-w3]
	// 2 v6e-16-0-w0,v6e-16-0-w1,v6e-16-0-w2,v6e-16-0-w3
	// step 1 on v6e-16-0-w0: TPU_WORKER_ID=0 TPU_NAME=v6e-16-0
	// step 1 on v6e-16-0-w1: TPU_WORKER_ID=1 TPU_NAME=v6e-16-0
	// step 1 on v6e-16-0-w2: TPU_WORKER_ID=2 TPU_NAME=v6e-16-0
	// step 1 on v6e-16-0-w3: TPU_WORKER_ID=3 TPU_NAME=v6e-16-0
}

func ExampleRunOnSlice() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleSlices)
	defer c.Close()

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e"})
	if err != nil {
		log.Fatal(err)
	}
	defer spg.Release(ctx)

	outs, err := ray.RunOnSlice(ctx, spg, exampleSqrt, 16)
	fmt.Println(outs, err)

	// The first host to fail is named ("host 2 of 4: ..."); every host
	// fails here, so which one is first varies.
	_, err = ray.RunOnSlice(ctx, spg, exampleSqrt, -1)
	fmt.Println(ray.CodeOf(err))
	var te *ray.TaskError
	if errors.As(err, &te) {
		fmt.Println(te.Message)
	}
	// Output:
	// [4 4 4 4] <nil>
	// TaskFailed
	// no square root of -1
}

func ExampleCode() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// No node has a TPU: the request fails at once, never queues.
	_, err := exampleSquare.Remote(ctx, c, 2, ray.Resources{ray.TPU: 4}).Get(ctx)
	fmt.Println(ray.CodeOf(err), errors.Is(err, ray.ErrInfeasible))
	fmt.Println(err)

	// Neither does any node have 16 CPUs.
	err = exampleSquare.Remote(ctx, c, 2, ray.Resources{ray.CPU: 16}).Err()
	fmt.Println(ray.CodeOf(err), errors.Is(err, ray.ErrInfeasible))

	// A topology v6e does not have is an invalid argument, listing the valid ones.
	_, err = ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x5", AcceleratorVersion: "v6e"})
	fmt.Println(ray.CodeOf(err), errors.Is(err, ray.ErrInvalidArgument))
	fmt.Println(err)

	// Success has code OK.
	_, err = exampleSquare.Remote(ctx, c, 2).Get(ctx)
	fmt.Println(ray.CodeOf(err))
	// Output:
	// Infeasible true
	// submit task example.square: no live node can ever hold {CPU: 1, TPU: 4}: the most any of the 2 live nodes has is {CPU: 4}
	// Infeasible true
	// InvalidArgument true
	// reserve TPU slices: topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
	// OK
}

func ExampleFormatSlices() {
	ctx := context.Background()
	c := exampleCluster(ctx, local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}})
	defer c.Close()

	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "4x4", AcceleratorVersion: "v6e", Name: "train"})
	if err != nil {
		log.Fatal(err)
	}
	defer spg.Release(ctx)

	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ray.FormatSlices(states))
	fmt.Print(ray.FormatSliceSummary(ray.SummarizeSlices(states)))
	// Output:
	// v6e-16-0 (v6e 4x4, 4 hosts): A = train
	//   A0 A0 A1 A1
	//   A0 A0 A1 A1
	//   A2 A2 A3 A3
	//   A2 A2 A3 A3
	// v6e-16-1 (v6e 4x4, 4 hosts): free
	//   .0 .0 .1 .1
	//   .0 .0 .1 .1
	//   .2 .2 .3 .3
	//   .2 .2 .3 .3
	// GEN        TOPOLOGY    TOTAL INTACT   FREE RESERVED
	// v6e        4x4             2      2      1        1
}

// exampleWait runs until its context ends.
var exampleWait = ray.NewTask("example.waitForever", func(ctx context.Context, _ struct{}) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
})

func ExampleObjectRef_Cancel() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	ref := exampleWait.Remote(ctx, c, struct{}{})
	if err := ref.Cancel(ctx); err != nil {
		log.Fatal(err)
	}
	_, err := ref.Get(ctx)
	fmt.Println(ray.CodeOf(err))
	// Output:
	// Canceled
}

// exampleTokens streams a prompt's words one by one, as a model streams
// tokens.
var exampleTokens = ray.NewStreamTask("example.tokens", func(ctx context.Context, prompt string, yield func(string) error) error {
	for _, w := range strings.Fields(prompt) {
		if err := yield(strings.ToUpper(w)); err != nil {
			return err // the caller has gone
		}
	}
	return nil
})

func ExampleNewStreamTask() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	// Values arrive as the task yields them; at most 4 wait unconsumed.
	for tok, err := range exampleTokens.Remote(ctx, c, "streams arrive as they are made", ray.StreamBuffer(4)).All(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(tok)
	}
	// Output:
	// STREAMS
	// ARRIVE
	// AS
	// THEY
	// ARE
	// MADE
}

type exampleChat struct{ turns int }

var (
	exampleChatClass = ray.NewActorClass("example.chat", func(ctx context.Context, _ struct{}) (*exampleChat, error) {
		return &exampleChat{}, nil
	})
	// exampleReply streams a reply word by word from the actor, which
	// keeps the conversation's state between calls.
	exampleReply = ray.NewStreamMethod(exampleChatClass, "reply", func(ctx context.Context, c *exampleChat, prompt string, yield func(string) error) error {
		c.turns++
		for _, w := range strings.Fields(fmt.Sprintf("turn %d: %s", c.turns, prompt)) {
			if err := yield(w); err != nil {
				return err
			}
		}
		return nil
	})
)

func ExampleNewStreamMethod() {
	ctx := context.Background()
	c := exampleCluster(ctx, exampleCPUs)
	defer c.Close()

	chat := exampleChatClass.Remote(ctx, c, struct{}{})
	for _, prompt := range []string{"hello there", "and again"} {
		var words []string
		for w, err := range exampleReply.Remote(ctx, chat, prompt).All(ctx) {
			if err != nil {
				log.Fatal(err)
			}
			words = append(words, w)
		}
		fmt.Println(strings.Join(words, " "))
	}
	// Output:
	// turn 1: hello there
	// turn 2: and again
}
