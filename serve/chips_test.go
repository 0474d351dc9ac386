package serve_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/tpu"
)

// chipsSeen records, per replica actor built, its node and the chips its
// env makes visible.
var chipsSeen sync.Map // actor ID -> [2]string{node, TPU_VISIBLE_CHIPS}

var (
	chipModel = ray.NewActorClass("servetest.chipModel", func(ctx context.Context, _ struct{}) (*chipModelState, error) {
		rc, _ := ray.Runtime(ctx)
		chipsSeen.Store(rc.ActorID(), [2]string{rc.NodeName(), rc.Env(tpu.EnvVisibleChips)})
		return &chipModelState{chips: rc.Env(tpu.EnvVisibleChips), bounds: rc.Env(tpu.EnvChipsPerHostBounds)}, nil
	})
	chipModelCall = ray.NewMethod(chipModel, "call", func(ctx context.Context, m *chipModelState, _ struct{}) ([2]string, error) {
		return [2]string{m.chips, m.bounds}, nil
	})
)

type chipModelState struct{ chips, bounds string }

// Four replicas of one chip each fill one v6e 2x2 host, each with a chip
// of its own, as Ray Serve replicas with {"TPU": 1} do; shutting down
// gives every chip back.
func TestChipsPerReplica(t *testing.T) {
	is := is.New(t)
	chipsSeen.Clear() // the replicas of this test only (-count, other tests)
	c := newSingleHostCluster(t, 1)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	d := serve.Deployment{
		Name: "chips", Replica: serve.Actor(chipModel, struct{}{}, serve.Unary(chipModelCall)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerReplica: 1, MinReplicas: 4,
	}
	is.NoErr(srv.Deploy(context.Background(), d))
	st := dep(srv.Status(), "chips")
	is.Equal(st.Ready, 4)
	is.Equal(st.ChipsHeld, 4)
	is.Equal(st.SlicesHeld, 0) // no replica holds a whole slice
	var chips []string
	host := ""
	for _, r := range st.Replicas {
		is.Equal(len(r.Hosts), 1)
		if host == "" {
			host = r.Hosts[0]
		}
		is.Equal(r.Hosts[0], host) // all four share the host
	}
	chipsSeen.Range(func(_, v any) bool {
		w := v.([2]string)
		is.Equal(w[0], host)
		chips = append(chips, w[1])
		return true
	})
	slices.Sort(chips)
	is.Equal(chips, []string{"0", "1", "2", "3"}) // one chip each, none shared
	code, _, body := post(t, client, base+"/chips", struct{}{})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(body), `"1,1,1"`)) // Ray's bounds of one chip
	is.True(strings.Contains(metricsText(srv), `goray_serve_chips_held{deployment="chips"} 4`))

	is.NoErr(srv.Shutdown(context.Background()))
	snap, err := c.Snapshot(context.Background())
	is.NoErr(err)
	for _, n := range snap.Nodes {
		is.Equal(n.Free[backend.TPU], n.Capacity[backend.TPU]) // every chip back
	}
}

func TestChipsPerReplicaBadInput(t *testing.T) {
	c, _ := newCluster(t, 1)
	tests := []struct {
		name     string
		topology string
		chips    int
		want     string
	}{
		{"the whole host", "2x2", 4, "a v6e 2x2 host has 4 chips, and a process holds 1, 2, 4 or 8 of them (as in Ray); use 1 or 2, or 0 for the whole host"},
		{"more than the host", "2x2", 5, "use 1 or 2"},
		{"not a chip count of a process", "2x2", 3, "use 1 or 2"},
		{"negative", "2x2", -1, "Deployment.ChipsPerReplica: -1 is negative"},
		{"an 8-chip host", "2x4", 8, "use 1, 2 or 4"},
		{"several hosts", "4x4", 1, "needs a single-host topology, but v6e 4x4 has 4 hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			srv := serve.New(c, nil)
			defer srv.Shutdown(context.Background())
			err := srv.Deploy(context.Background(), serve.Deployment{
				Name: "bad", Replica: serve.Actor(chipModel, struct{}{}, serve.Unary(chipModelCall)),
				Accelerator: "v6e", Topology: tt.topology, ChipsPerReplica: tt.chips,
			})
			is.True(err != nil)
			is.True(strings.Contains(err.Error(), tt.want)) // says what is wrong and what is valid
		})
	}
}

// A Deploy that cannot place every replica's chips says what it waited
// for in chips, not in slices.
func TestChipsPerReplicaDeploySaysWhatItWaitedFor(t *testing.T) {
	is := is.New(t)
	c := newSingleHostCluster(t, 1)
	srv := serve.New(c, nil)
	defer srv.Shutdown(context.Background())
	// The Deploy's context ends once the 4 replicas that fit are ready
	// (a condition, not a time: under load they may take more than any
	// fixed wait), or after a minute.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		srv.WaitStatus(ctx, func(st serve.Status) bool { return dep(st, "five").Ready == 4 }) //nolint:errcheck // ends with ctx either way
		cancel()
	}()
	err := srv.Deploy(ctx, serve.Deployment{
		Name: "five", Replica: serve.Actor(chipModel, struct{}{}, serve.Unary(chipModelCall)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerReplica: 1, MinReplicas: 5,
	})
	is.True(err != nil)
	is.True(strings.Contains(err.Error(), `4 of 5 replicas (MinReplicas) ready, 1 starting, each waiting for 1 chip of a v6e 2x2 host (live hosts of that shape: 1, with 0 chips free, room for 0 more replicas)`))
}
