package cluster_test

import (
	"context"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/internal/testkit"
)

// TestClaimsCarryKindAndHandles: a claim says whether it is of a
// sub-slice (Claim.Subslice, not guessed from its host count) and carries
// each host's Handle as its source last reported it, so that a runner
// pins work to a replaced host's new machine.
func TestClaimsCarryKindAndHandles(t *testing.T) {
	is := is.New(t)
	hosts := tpuHosts4x4(1)
	for i := range hosts {
		hosts[i].Handle = "vm-" + hosts[i].Name
	}
	src := newTestSource(t, hosts)
	var claims []cluster.Claim
	src.onClaim = func(c cluster.Claim) { claims = append(claims, c) }
	rt := start(t, src, newTestRunner())
	ctx := context.Background()

	sub, err := rt.ReserveSlices(ctx, subRequest("sub"))
	is.NoErr(err)
	is.NoErr(rt.RemovePlacementGroup(ctx, sub.Group))
	is.Equal(len(claims), 1)
	is.True(claims[0].Subslice)
	is.Equal(claims[0].Handles, [][]any{{"vm-s0-w0", "vm-s0-w2"}})

	// Host 2 is lost and comes back on another machine.
	src.sink.NodeLost("s0-w2", nil)
	repl := hosts[2]
	repl.Handle = "vm-replacement"
	src.sink.NodeAdded(repl)
	whole, err := rt.ReserveSlices(ctx, wholeRequest("whole"))
	is.NoErr(err)
	is.NoErr(rt.RemovePlacementGroup(ctx, whole.Group))
	is.Equal(len(claims), 2)
	is.True(!claims[1].Subslice)
	is.Equal(claims[1].Hosts, [][]string{{"s0-w0", "s0-w1", "s0-w2", "s0-w3"}})
	is.Equal(claims[1].Handles, [][]any{{"vm-s0-w0", "vm-s0-w1", "vm-replacement", "vm-s0-w3"}})
	is.NoErr(rt.Close())
}

// TestCheckSlicesTPUHost: the typed TPU host is checked against the
// node's TPU capacity and its slice's worker IDs.
func TestCheckSlicesTPUHost(t *testing.T) {
	bad := func(mutate func(n *cluster.Node)) []cluster.Node {
		hosts := tpuHosts4x4(1)
		mutate(&hosts[1])
		return hosts
	}
	cases := []struct {
		name  string
		nodes []cluster.Node
		want  string // "" for no error
	}{
		{"whole slice", tpuHosts4x4(1), ""},
		{"no slice name", bad(func(n *cluster.Node) { n.TPU.Slice = "" }), `node "s0-w1": its TPUHost has no Slice name`},
		{"worker ID out of range", bad(func(n *cluster.Node) { n.TPU.WorkerID = 4 }), `worker ID 4 is not in 0..3`},
		{"duplicate worker", bad(func(n *cluster.Node) { n.TPU.WorkerID = 0 }), `nodes "s0-w0" and "s0-w1" are both worker 0`},
		{"chips differ from capacity", bad(func(n *cluster.Node) { n.Resources = backend.Resources{backend.TPU: 8} }), `invalid chips per host 8 for v6e 4x4`},
		{"missing host", tpuHosts4x4(1)[:3], `has no worker 3: a slice needs all 4 hosts`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			err := cluster.CheckSlices("check", tc.nodes)
			if tc.want == "" {
				is.NoErr(err)
				return
			}
			is.Equal(backend.CodeOf(err), backend.InvalidArgument)
			testkit.ErrContains(t, err, tc.want)
		})
	}
}
