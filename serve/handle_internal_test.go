package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

// A Process deployment cannot take handle calls: the error says so and
// where to send HTTP instead.
func TestHandleToProcessDeployment(t *testing.T) {
	is := is.New(t)
	d := testDeployment(1, 1)
	d.spec.Replica = Process(ProcessSpec{Command: []string{"vllm"}})
	_, err := Handle[string, string](d.s, "t")
	t.Log(err)
	is.True(errors.Is(err, ErrBadCall))
	is.True(strings.Contains(err.Error(), `deployment "t": it runs a serve.Process server, which handles cannot call: send HTTP to /t/<path>`))
}

// Each kind of CallError matches its sentinel and no other, and says which
// deployment failed.
func TestCallErrorIs(t *testing.T) {
	sentinels := map[string]error{
		kindOverloaded: ErrOverloaded, kindShutdown: ErrShuttingDown, kindNotFound: ErrNoDeployment,
		kindBadCall: ErrBadCall, kindLost: ErrReplicaLost, kindTimeout: context.DeadlineExceeded,
		kindCanceled: context.Canceled, kindFailed: ray.ErrTaskFailed, kindUnreached: ErrRouterUnreachable,
	}
	for kind, want := range sentinels {
		t.Run(kind, func(t *testing.T) {
			is := is.New(t)
			e := &CallError{Deployment: "m", Code: http.StatusServiceUnavailable, Message: "it failed", kind: kind}
			for _, other := range sentinels {
				is.Equal(errors.Is(e, other), other == want)
			}
			is.Equal(e.Error(), `serve: deployment "m": it failed (status 503)`)
		})
	}
}
