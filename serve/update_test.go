package serve_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// A second Deploy of a name updates the deployment: the new version's
// replicas start and become ready beside the old ones, then requests go
// to the new version and the old one drains; 50 concurrent clients of an
// idempotent deployment see no failed request meanwhile, and afterwards
// only the new version's slices are held.
func TestRedeployUpdatesWithoutFailures(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 4)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	v1 := deployment("m")
	v1.MinReplicas, v1.Idempotent, v1.MaxQueuedRequests = 2, true, 200
	is.NoErr(srv.Deploy(context.Background(), v1))

	finish := clientsThroughUpdate(t, client, base+"/m")
	v2 := v1
	v2.Replica = echoReplica("v2:")
	err := srv.Deploy(context.Background(), v2)
	failures, v2seen := finish()
	is.NoErr(err)
	is.Equal(failures, int64(0))
	is.Equal(v2seen, int64(50)) // every client reached the new version

	st := dep(srv.Status(), "m")
	is.Equal(st.Ready, 2)
	for _, r := range st.Replicas {
		is.True(strings.HasPrefix(r.ID, "m-v2-")) // the old version's replicas are gone
	}
	if n := reservedSlices(t, c); n != 2 {
		b, _ := json.MarshalIndent(srv.Status(), "", " ")
		t.Fatalf("%d slices reserved; status %s", n, b)
	}
	code, _, b := post(t, client, base+"/m", EchoIn{Text: "y"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(b), `"Text":"v2:y"`))

	// An update that finds no slice for its new replicas (the test holds
	// the two free ones) fails when its context ends and leaves the old
	// version serving with its replicas; so does one whose replicas can
	// never start.
	held, err := ray.NewSlicePlacementGroup(context.Background(), c, ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e", ChipsPerVM: 4, NumSlices: 2})
	is.NoErr(err)
	v3 := v1
	v3.Replica = echoReplica("v3:")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = srv.Deploy(ctx, v3)
	t.Log(err)
	is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
	is.NoErr(held.Release(context.Background()))
	v3.Topology, v3.MinReplicas = "4x4", 1 // left to the replica's own reservation
	err = srv.Deploy(context.Background(), v3)
	t.Log(err)
	is.Equal(ray.CodeOf(err), ray.Infeasible)
	code, _, b = post(t, client, base+"/m", EchoIn{Text: "z"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(b), `"Text":"v2:z"`))
	// The update to MinReplicas 1 may drain one old replica before it
	// fails, to make room for its own (MinReplicas+MaxSurge: 2 replicas
	// of both versions, 1 of them ready throughout); the old version then
	// starts one again. Its two replicas are ready again, and nothing else
	// holds a slice.
	waitStatus(t, srv, "the old version's 2 replicas ready again", func(st serve.Status) bool {
		d := dep(st, "m")
		return d.Ready == 2 && len(d.Replicas) == 2
	})
	is.Equal(reservedSlices(t, c), 2)
}

// A rolling update within RollingUpdate's bounds: with MaxSurge 1 and
// MaxUnavailable 0 on a cluster with room for one replica more than the
// deployment (3 slices, 2 replicas), the replicas are replaced one at a
// time; with MaxSurge 0 and MaxUnavailable 1 on a cluster with no room at
// all, one old replica makes way for each new one. Either way 50
// concurrent clients of an idempotent deployment see no failed request,
// never more than MinReplicas+MaxSurge slices are held, and afterwards
// only the new version's replicas remain. (The whole new version beside
// the old, the default, cannot start on these clusters.)
func TestRollingUpdate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices int
		update serve.RollingUpdate
	}{
		{"MaxSurge 1", 3, serve.RollingUpdate{MaxSurge: 1}},
		{"MaxUnavailable 1", 2, serve.RollingUpdate{MaxUnavailable: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			c, _ := newCluster(t, tc.slices)
			srv := serve.New(c, nil)
			base, client := startServer(t, srv)
			v1 := deployment("m")
			v1.MinReplicas, v1.Idempotent, v1.MaxQueuedRequests = 2, true, 200
			v1.RollingUpdate = &tc.update
			is.NoErr(srv.Deploy(context.Background(), v1))

			finish := clientsThroughUpdate(t, client, base+"/m")
			v2 := v1
			v2.Replica = echoReplica("v2:")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err := srv.Deploy(ctx, v2)
			failures, v2seen := finish()
			is.NoErr(err)
			is.Equal(failures, int64(0))
			is.Equal(v2seen, int64(50)) // every client reached the new version

			st := dep(srv.Status(), "m")
			is.Equal(st.Ready, 2)
			for _, r := range st.Replicas {
				is.True(strings.HasPrefix(r.ID, "m-v2-")) // the old version's replicas are gone
			}
			is.Equal(reservedSlices(t, c), 2)
		})
	}
}

// clientsThroughUpdate starts 50 concurrent clients of url's echo
// deployment that post until finish is called and each has seen an answer
// of version "v2:". finish waits for them and returns how many requests
// failed (a client stops at its first failure, reported with t.Errorf) and
// how many clients reached v2.
func clientsThroughUpdate(t *testing.T, client *http.Client, url string) (finish func() (failures, v2seen int64)) {
	var stop atomic.Bool
	var failed, seen atomic.Int64
	var firstFailure sync.Once
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			saw := false
			for !stop.Load() || !saw {
				code, _, b := post(t, client, url, EchoIn{Text: "x"})
				if code != http.StatusOK {
					failed.Add(1)
					firstFailure.Do(func() { t.Errorf("a request failed during the update: %d %s", code, b) })
					return
				}
				var out EchoOut
				if err := json.Unmarshal(b, &out); err != nil {
					t.Errorf("answer %q: %v", b, err)
					return
				}
				if strings.HasPrefix(out.Text, "v2:") && !saw {
					saw = true
					seen.Add(1)
				}
			}
		})
	}
	return func() (int64, int64) {
		stop.Store(true)
		wg.Wait()
		return failed.Load(), seen.Load()
	}
}
