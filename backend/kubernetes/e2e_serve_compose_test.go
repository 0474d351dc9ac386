//go:build e2e

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// The composition test's model: it answers after Work with the pod it ran
// in.
type composeModel struct{}

type composeIn struct {
	Text string
	Work time.Duration
}

type composeOut struct {
	Text, Pod string
}

// The front deployment calls the model through a handle from its
// constructor input, or by name through a Router, from its worker pod.
type composeFront struct {
	model  serve.DeploymentHandle[composeIn, composeOut]
	router serve.Router
}

type composeFrontInit struct {
	Model  serve.DeploymentHandle[composeIn, composeOut]
	Router serve.Router
}

type composeFrontIn struct {
	Text string
	// ByName gets a handle to this deployment through the Router.
	ByName string
	// Work is the model's; Timeout bounds the nested call; Fanout makes
	// that many nested calls at once and counts how they ended.
	Work, Timeout time.Duration
	Fanout        int
}

type composeFrontOut struct {
	Pod   string
	Model composeOut
	// The nested call's error and what it matches; Took is its duration.
	Err                    string
	NoDeployment, Deadline bool
	Took                   time.Duration
	// Of a fanout: calls that succeeded and that were refused as
	// overloaded.
	OK, Overloaded int
}

var (
	composeModelClass = ray.NewActorClass("k8stest.composemodel", func(ctx context.Context, _ struct{}) (*composeModel, error) {
		return &composeModel{}, nil
	})
	composeModelCall = ray.NewMethod(composeModelClass, "call", func(ctx context.Context, m *composeModel, in composeIn) (composeOut, error) {
		select {
		case <-time.After(in.Work):
		case <-ctx.Done():
			return composeOut{}, ctx.Err()
		}
		return composeOut{Text: "model:" + in.Text, Pod: os.Getenv("POD_NAME")}, nil
	})
	composeFrontClass = ray.NewActorClass("k8stest.composefront", func(ctx context.Context, in composeFrontInit) (*composeFront, error) {
		return &composeFront{model: in.Model, router: in.Router}, nil
	})
	composeFrontCall = ray.NewMethod(composeFrontClass, "call", func(ctx context.Context, f *composeFront, in composeFrontIn) (composeFrontOut, error) {
		out := composeFrontOut{Pod: os.Getenv("POD_NAME")}
		if in.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, in.Timeout)
			defer cancel()
		}
		model := f.model
		if in.ByName != "" {
			var err error
			if model, err = serve.Handle[composeIn, composeOut](f.router, in.ByName); err != nil {
				return out, err
			}
		}
		if in.Fanout > 0 {
			var ok, over atomic.Int32
			var wg sync.WaitGroup
			for i := range in.Fanout {
				wg.Go(func() {
					_, err := model.Call(ctx, composeIn{Text: fmt.Sprint(i), Work: in.Work})
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, serve.ErrOverloaded):
						over.Add(1)
					}
				})
			}
			wg.Wait()
			out.OK, out.Overloaded = int(ok.Load()), int(over.Load())
			return out, nil
		}
		start := time.Now()
		var err error
		out.Model, err = model.Call(ctx, composeIn{Text: in.Text, Work: in.Work})
		out.Took = time.Since(start)
		if err != nil {
			out.Err = err.Error()
			out.NoDeployment = errors.Is(err, serve.ErrNoDeployment)
			out.Deadline = errors.Is(err, context.DeadlineExceeded)
		}
		return out, nil
	})
)

// TestE2EServeCompose: a front deployment whose replica runs in a worker
// pod (isolated network) calls a model deployment of two replicas, each
// on a v6e 2x2 slice of its own pod, through a handle: the calls come back
// to the driver's router over the pod network (at the driver's host IP),
// spread over both model pods, report an unknown deployment by name with
// the valid ones, refuse calls beyond the model's limits and queue with
// ErrOverloaded in the pod, and carry the pod's deadline to the router,
// which frees the model's slots at once.
func TestE2EServeCompose(t *testing.T) {
	is := is.New(t)
	_, c := slicesCluster(t, "2x2", []string{"slice-a", "slice-b", "slice-c"}, nil)
	srv := serve.New(c, nil)
	defer srv.Shutdown(context.WithoutCancel(t.Context()))
	is.NoErr(srv.Deploy(t.Context(), serve.Deployment{
		Name:        "model",
		Replica:     serve.Actor(composeModelClass, struct{}{}, serve.Unary(composeModelCall)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerVM: 4,
		MinReplicas: 2, MaxConcurrentRequests: 1, MaxQueuedRequests: 1,
	}))
	model, err := serve.Handle[composeIn, composeOut](srv, "model")
	is.NoErr(err)
	is.NoErr(srv.Deploy(t.Context(), serve.Deployment{
		Name:        "front",
		Replica:     serve.Actor(composeFrontClass, composeFrontInit{Model: model, Router: srv.Router()}, serve.Unary(composeFrontCall)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerVM: 4,
		MaxConcurrentRequests: 8,
	}))
	front, err := serve.Handle[composeFrontIn, composeFrontOut](srv, "front")
	is.NoErr(err)

	// Sequential calls: each nested call finds a free model replica; the
	// router spreads them over both.
	pods := map[string]int{}
	var frontPod string
	for i := range 12 {
		out, err := front.Call(t.Context(), composeFrontIn{Text: fmt.Sprint(i)})
		is.NoErr(err)
		is.Equal(out.Err, "")
		is.Equal(out.Model.Text, fmt.Sprintf("model:%d", i))
		is.True(strings.HasPrefix(out.Pod, "goray-")) // the front ran in a worker pod
		frontPod = out.Pod
		pods[out.Model.Pod]++
	}
	t.Logf("front pod %s; model calls by pod: %v", frontPod, pods)
	is.Equal(len(pods), 2)
	is.True(pods[frontPod] == 0)

	out, err := front.Call(t.Context(), composeFrontIn{Text: "n", ByName: "nope"})
	is.NoErr(err)
	t.Log(out.Err)
	is.True(out.NoDeployment)
	is.True(strings.Contains(out.Err, `no deployment "nope" on this server (it has "front", "model")`))

	// Eight nested calls at once of 2s each: two run, one queues, the
	// rest are refused at once in the pod.
	out, err = front.Call(t.Context(), composeFrontIn{Fanout: 8, Work: 2 * time.Second})
	is.NoErr(err)
	t.Logf("fanout of 8: %d served, %d refused as overloaded", out.OK, out.Overloaded)
	is.Equal(out.OK+out.Overloaded, 8)
	is.True(out.Overloaded >= 4)

	// The pod's deadline reaches the router: the call ends after 300ms
	// though the model works for 5s, and the model's slot is freed then.
	start := time.Now()
	out, err = front.Call(t.Context(), composeFrontIn{Text: "slow", Work: 5 * time.Second, Timeout: 300 * time.Millisecond})
	is.NoErr(err)
	t.Logf("deadline: %s after %v", out.Err, out.Took)
	is.True(out.Deadline)
	is.True(out.Took < 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	is.NoErr(srv.WaitStatus(ctx, func(st serve.Status) bool {
		d, _ := st.Deployment("model")
		for _, r := range d.Replicas {
			if r.Ongoing != 0 {
				return false
			}
		}
		return true
	}))
	t.Logf("model slots free %v after the slow call began", time.Since(start))
	is.True(time.Since(start) < 4*time.Second)
}
