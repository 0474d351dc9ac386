package serve_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// Delete removes one deployment: requests for it are 503 with Retry-After
// while it goes and 404 after, the request its replica handles finishes,
// its slice is released, and the other deployments serve on.
func TestDelete(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is.NoErr(srv.Deploy(context.Background(), deployment("a")))
	is.NoErr(srv.Deploy(context.Background(), deployment("b")))

	// A request in flight on a's replica while a is deleted.
	g := newGate("del")
	var wg sync.WaitGroup
	inflight := 0
	wg.Go(func() { inflight, _, _ = post(t, client, base+"/a", EchoIn{Text: "x", Gate: g}) })
	gates.arrivals(t, g, 1)
	deleted := make(chan error, 1)
	go func() { deleted <- srv.Delete(context.Background(), "a") }()

	// While it goes: 503 with Retry-After, for HTTP and handles alike.
	deadline := time.Now().Add(time.Minute)
	for {
		code, retry, b := post(t, client, base+"/a", EchoIn{Text: "y"})
		if code == http.StatusServiceUnavailable {
			t.Logf("%d %s", code, b)
			is.True(retry != "")
			break
		}
		is.Equal(code, http.StatusOK) // before Delete began
		if time.Now().After(deadline) {
			t.Fatal("no 503 within a minute of Delete")
		}
	}
	h, err := serve.Handle[EchoIn, EchoOut](srv, "a")
	is.True(err != nil)
	is.Equal(ray.CodeOf(err), ray.Unavailable)
	is.True(h.Deployment() == "")
	is.Equal(ray.CodeOf(srv.Delete(context.Background(), "a")), ray.FailedPrecondition) // being deleted

	gates.release(g)
	wg.Wait()
	is.Equal(inflight, http.StatusOK) // drained, not cut off
	is.NoErr(<-deleted)

	code, _, _ := post(t, client, base+"/a", EchoIn{Text: "z"})
	is.Equal(code, http.StatusNotFound)
	code, _, _ = post(t, client, base+"/b", EchoIn{Text: "z"})
	is.Equal(code, http.StatusOK)
	_, found := srv.Status().Deployment("a")
	is.True(!found)
	is.Equal(reservedSlices(t, c), 1) // b's only
	is.Equal(ray.CodeOf(srv.Delete(context.Background(), "a")), ray.NotFound)
	// The name can be deployed again.
	is.NoErr(srv.Deploy(context.Background(), deployment("a")))
}
