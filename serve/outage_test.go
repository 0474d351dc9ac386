package serve_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// When every replica of a deployment that served is lost and its
// replacement cannot be ready (the cluster's other slice is held), the
// router refuses requests at once with 503 and Retry-After, and fails the
// requests queued when the last replica went, instead of holding them for
// their RequestTimeout (504); a handle call gets serve.ErrNoReplica. Once
// a replacement is ready, requests are served again.
func TestOutageFailsFast(t *testing.T) {
	is := is.New(t)
	c, b := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	d := deployment("out")
	d.MinReplicas, d.MaxConcurrentRequests = 1, 1
	d.RequestTimeout = 20 * time.Second              // what a request waited for before
	d.Health = &serve.HealthCheck{Period: time.Hour} // the host watch detects the loss
	is.NoErr(srv.Deploy(context.Background(), d))
	held, err := ray.NewSlicePlacementGroup(context.Background(), c, ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e", ChipsPerVM: 4, NumSlices: 1})
	is.NoErr(err) // the replacement has no slice to start on

	// One request on the replica, one queued behind it.
	gate := newGate("out")
	defer gates.release(gate)
	type answer struct {
		code       int
		retryAfter string
		body       string
	}
	send := func(in EchoIn) chan answer {
		ch := make(chan answer, 1)
		go func() {
			code, retry, body := post(t, client, base+"/out", in)
			ch <- answer{code, retry, string(body)}
		}()
		return ch
	}
	running := send(EchoIn{Text: "a", Gate: gate})
	gates.arrivals(t, gate, 1)
	queued := send(EchoIn{Text: "b"})
	waitStatus(t, srv, "a queued request", func(st serve.Status) bool { return dep(st, "out").Queued == 1 })

	victim := dep(srv.Status(), "out").Replicas[0]
	is.NoErr(b.KillNode(context.Background(), victim.Hosts[0]))

	a := <-running
	t.Logf("running: %d %s", a.code, a.body)
	is.Equal(a.code, http.StatusServiceUnavailable) // not idempotent: its replica was lost
	a = <-queued
	t.Logf("queued: %d %s", a.code, a.body)
	is.Equal(a.code, http.StatusServiceUnavailable)
	is.Equal(a.retryAfter, "1")
	is.True(strings.Contains(a.body, "no replica is ready"))

	code, retry, body := post(t, client, base+"/out", EchoIn{Text: "c"})
	t.Logf("new: %d %s", code, body)
	is.Equal(code, http.StatusServiceUnavailable)
	is.Equal(retry, "1")
	is.True(strings.Contains(string(body), "every replica was lost"))

	h, err := serve.Handle[EchoIn, EchoOut](srv, "out")
	is.NoErr(err)
	_, err = h.Call(context.Background(), EchoIn{Text: "d"})
	is.True(errors.Is(err, serve.ErrNoReplica))
	is.Equal(ray.CodeOf(err), ray.Unavailable)

	// The slice comes free: the replacement starts, and serves.
	is.NoErr(held.Release(context.Background()))
	waitStatus(t, srv, "the replacement", func(st serve.Status) bool { return dep(st, "out").Ready == 1 })
	code, _, body = post(t, client, base+"/out", EchoIn{Text: "e"})
	is.Equal(code, http.StatusOK)
	is.True(strings.Contains(string(body), `"Text":"out:e"`))
}
