package main

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const want = `expected error, cpu-a is dead: Infeasible
  submit task faults.square: no live node can ever hold {CPU: 1} with node selector {zone=a}: none of the 5 live nodes matches the selector (1 more node is dead)
cpu-a restarted: square of 4 in zone a is 16

preempted while reserved:
v6e-16-0 (v6e 4x4, 4 hosts): A = train, not intact
  x0 x0 x1 x1
  x0 x0 x1 x1
  x2 x2 x3 x3
  x2 x2 x3 x3

released, hosts restarted:
v6e-16-0 (v6e 4x4, 4 hosts): free
  .0 .0 .1 .1
  .0 .0 .1 .1
  .2 .2 .3 .3
  .2 .2 .3 .3
`

// TestOutput runs the example on the cluster main builds and checks what it
// prints: the failure a dead node causes, the recovery after a restart, and
// a preempted slice's hosts.
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
}
