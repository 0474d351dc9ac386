package dashboard_test

import (
	"context"
	"fmt"
	"log"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
)

// A dashboard of a simulator with two v6e 4x4 slices, one of them
// reserved. A driver would serve it with d.ListenAndServe(ctx, "") and
// open http://127.0.0.1:8265.
func Example() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "4x4", Count: 2}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	d, err := dashboard.New(c, nil)
	if err != nil {
		log.Fatal(err)
	}
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", Name: "trainer"})
	if err != nil {
		log.Fatal(err)
	}
	defer spg.Release(ctx)

	v := d.View(ctx)
	for _, sh := range v.Shapes {
		fmt.Printf("%s %s: %d slices, %d free, %d reserved\n", sh.Generation, sh.Topology, sh.Total, sh.Free, sh.Reserved)
		for _, s := range sh.Slices {
			fmt.Printf("  %s %v chips: %s %s\n", s.Name, s.Dims, s.State, s.GroupName)
		}
	}
	// Output:
	// v6e 4x4: 2 slices, 1 free, 1 reserved
	//   v6e-16-0 [4 4 1] chips: reserved trainer
	//   v6e-16-1 [4 4 1] chips: free
}
