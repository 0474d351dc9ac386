package fake_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/fake"
	"github.com/goray-dev/goray/ray"
)

var fetch = ray.NewTask("faketest.example.fetch", func(ctx context.Context, shard int) (string, error) {
	return fmt.Sprintf("shard-%d", shard), nil
})

// A test builds a cluster on the fake, scripts a lost node for the next
// attempt of a task, and checks that the code under test survives it by
// retrying. In a test, close the cluster with t.Cleanup(func() { c.Close() }).
func Example() {
	ctx := context.Background()
	b := fake.New(nil)
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	b.FailNext("faketest.example.fetch", 1, backend.Errorf(backend.Unavailable, "", "node lost"))
	v, err := fetch.Remote(ctx, c, 7, ray.Retries(1)).Get(ctx)
	fmt.Println(v, err)

	for _, call := range b.CallsTo("faketest.example.fetch") {
		fmt.Printf("%s %s attempt=%d arg=%s err=%v\n", call.Kind, call.Name, call.Attempt, call.Arg.Data, call.Err)
	}
	// Output:
	// shard-7 <nil>
	// task faketest.example.fetch attempt=0 arg=7 err=node lost
	// task faketest.example.fetch attempt=1 arg=7 err=<nil>
}

// SetError makes a task fail as if its code had returned the error.
func ExampleBackend_SetError() {
	ctx := context.Background()
	b := fake.New(nil)
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	b.SetError("faketest.example.fetch", errors.New("permission denied"))
	_, err = fetch.Remote(ctx, c, 1).Get(ctx)
	fmt.Println(ray.CodeOf(err))
	fmt.Println(err)
	// Output:
	// TaskFailed
	// task faketest.example.fetch failed (attempt 0): permission denied
}

// A reactor computes results from the call, or fails calls the scripts
// cannot reach, such as placement group creation.
func ExampleBackend_PrependReactor() {
	ctx := context.Background()
	b := fake.New(nil)
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	b.PrependReactor(fake.KindTask, "faketest.example.fetch", func(call fake.Call) (bool, any, error) {
		var shard int
		if err := call.DecodeArg(&shard); err != nil {
			return true, nil, err
		}
		return true, fmt.Sprintf("cached-%d", shard), nil
	})
	b.PrependReactor(fake.KindPlacementGroup, "*", func(call fake.Call) (bool, any, error) {
		return true, nil, backend.Errorf(backend.Infeasible, "", "no free v6e 4x4 slice")
	})

	v, err := fetch.Remote(ctx, c, 3).Get(ctx)
	fmt.Println(v, err)
	_, err = ray.NewPlacementGroup(ctx, c, ray.PlacementGroupSpec{Bundles: []ray.Bundle{{Resources: ray.Resources{ray.TPU: 4}}}})
	fmt.Println(ray.CodeOf(err), err)
	// Output:
	// cached-3 <nil>
	// Infeasible no free v6e 4x4 slice
}
