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

const want = `square of 3: 9 - square of that: 81
squares: [1 4 9 16 25] - sum: 55
counter: [101 103 106]
placement group: bundle 0 on node-0 (zone a)
placement group: bundle 1 on node-1 (zone b)
placement group: bundle 2 on node-2 (zone c)
expected error, asking for 64 CPUs: Infeasible
  submit task hello.square: no live node can ever hold {CPU: 64}: the most any of the 3 live nodes has is {CPU: 4, memory: 16GiB}
`

// TestOutput runs the example on the cluster main builds and checks what it
// prints.
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
