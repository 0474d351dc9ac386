package main

import (
	"bytes"
	"context"
	_ "embed"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

//go:embed testdata/output.txt
var want string

// TestOutput runs the example on the simulator and checks what it prints:
// worker IDs, hostnames and chips of a v6e 4x4, the MEGASCALE_* env of a
// two-slice reservation, the per-process env of a v7x 2x2x2's two processes
// per host, and a 4x4 sub-slice of a v6e 8x8 with its rewritten env.
func TestOutput(t *testing.T) {
	ctx := context.Background()
	b, err := local.New(clusterSpec(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	if err := run(ctx, c, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	// Everything the example reserved was released.
	states, err := ray.TPUSlices(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.ReservedBy != 0 || len(st.Subslices) != 0 {
			t.Errorf("slice %s still reserved", st.Name)
		}
	}
}
