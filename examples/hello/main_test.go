package main

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const want = `squares: [1 4 9 16 25]
sum of squares: 55 - square of square of 3: 81
counter: [101 103 106]
placement group: bundle 0 on node-0 (zone a)
placement group: bundle 1 on node-1 (zone b)
placement group: bundle 2 on node-2 (zone c)
infeasible: Infeasible
  submit task hello.square: no live node can ever hold {CPU: 64}: 3 of 3 live nodes match; the most any of them has is {CPU: 4, memory: 16GiB}
`

// TestOutput runs the example through its Wire injector and checks what it
// prints.
func TestOutput(t *testing.T) {
	ctx := context.Background()
	c, cleanup, err := initCluster(ctx, clusterSpec(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	var out bytes.Buffer
	if err := run(ctx, c, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
