package serve_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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

	var stop atomic.Bool
	var failures, v2seen atomic.Int64
	var firstFailure sync.Once
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			saw := false
			for !stop.Load() || !saw {
				code, _, b := post(t, client, base+"/m", EchoIn{Text: "x"})
				if code != http.StatusOK {
					failures.Add(1)
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
					v2seen.Add(1)
				}
			}
		})
	}
	v2 := v1
	v2.Replica = echoReplica("v2:")
	err := srv.Deploy(context.Background(), v2)
	stop.Store(true)
	wg.Wait()
	is.NoErr(err)
	is.Equal(failures.Load(), int64(0))
	is.Equal(v2seen.Load(), int64(50)) // every client reached the new version

	st := dep(srv.Status(), "m")
	is.Equal(st.Ready, 2)
	for _, r := range st.Replicas {
		is.True(strings.HasPrefix(r.ID, "m-v2-")) // the old version's replicas are gone
	}
	is.Equal(reservedSlices(t, c), 2)
	code, _, b := post(t, client, base+"/m", EchoIn{Text: "y"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(b), `"Text":"v2:y"`))

	// An update the cluster cannot hold beside the old version fails and
	// leaves the old version serving.
	v3 := v1
	v3.Replica, v3.MinReplicas, v3.MaxReplicas = echoReplica("v3:"), 3, 3
	ctx, cancel := context.WithTimeout(context.Background(), 500_000_000)
	defer cancel()
	err = srv.Deploy(ctx, v3)
	t.Log(err)
	is.Equal(ray.CodeOf(err), ray.DeadlineExceeded)
	code, _, b = post(t, client, base+"/m", EchoIn{Text: "z"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(b), `"Text":"v2:z"`))
	is.Equal(reservedSlices(t, c), 2)
}
