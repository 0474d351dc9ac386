package serve_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// newCPUCluster simulates two 4-CPU nodes, each with one "tok" resource
// (Ray's custom resources), and one v6e 2x2 slice.
func newCPUCluster(t *testing.T) *ray.Cluster {
	t.Helper()
	b, err := local.New(local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 2, Resources: backend.Resources{backend.CPU: 4, backend.Memory: 8 << 30, "tok": 1}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 1}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ray.NewCluster(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A CPU deployment (Resources instead of a slice) runs actor and process
// replicas next to TPU ones, with the same router, autoscaling, health
// checks and metrics, and holds no TPU; resources no node has fail at
// once with Infeasible.
func TestCPUDeployment(t *testing.T) {
	c := newCPUCluster(t)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	cpu := func(name string) serve.Deployment {
		return serve.Deployment{
			Name: name, Replica: echoReplica(name + ":"),
			Resources:   ray.Resources{ray.CPU: 3, ray.Memory: 1 << 30, "tok": 1}, // one replica per CPU node
			Idempotent:  true,
			MinReplicas: 2, MaxReplicas: 2,
			Health: &serve.HealthCheck{Period: 20 * time.Millisecond, FailureThreshold: 2},
		}
	}
	is := is.New(t)
	is.NoErr(srv.Deploy(context.Background(), cpu("tok")))
	is.NoErr(srv.Deploy(context.Background(), serve.Deployment{Name: "tpu", Replica: echoReplica("tpu:"), Accelerator: "v6e", Topology: "2x2"}))

	t.Run("routes, holds no TPU, counts in metrics", func(t *testing.T) {
		is := is.New(t)
		st := dep(srv.Status(), "tok")
		is.Equal(st.Ready, 2)
		is.Equal(st.SlicesHeld, 0)
		is.Equal(st.ChipsHeld, 0)
		hosts := map[string]bool{}
		for _, r := range st.Replicas {
			is.Equal(len(r.Slices), 0)
			is.Equal(len(r.Hosts), 1)
			hosts[r.Hosts[0]] = true
			is.True(strings.HasPrefix(r.Hosts[0], "cpu")) // a CPU node, not a TPU host
		}
		is.Equal(len(hosts), 2)
		is.Equal(reservedSlices(t, c), 1) // the TPU deployment's only
		for range 4 {
			code, _, b := post(t, client, base+"/tok", EchoIn{Text: "x"})
			is.Equal(code, 200)
			is.True(strings.Contains(string(b), `"Text":"tok:x"`))
		}
		is.True(strings.Contains(metricsText(srv), `goray_serve_requests_total{code="200",deployment="tok"} 4`))
	})
	t.Run("health checks replace a replica", func(t *testing.T) {
		is := is.New(t)
		old := dep(srv.Status(), "tok").Replicas[0]
		unhealthy.Store(old.Hosts[0], true)
		waitStatus(t, srv, "a failed check", func(st serve.Status) bool { return dep(st, "tok").ReplicaFailures >= 1 })
		unhealthy.Delete(old.Hosts[0])
		waitStatus(t, srv, "two ready replicas again", func(st serve.Status) bool {
			d := dep(st, "tok")
			if d.Ready != 2 {
				return false
			}
			for _, r := range d.Replicas {
				if r.ID == old.ID {
					return false
				}
			}
			return true
		})
		code, _, _ := post(t, client, base+"/tok", EchoIn{Text: "y"})
		is.Equal(code, 200)
	})
	t.Run("autoscaling", func(t *testing.T) {
		is := is.New(t)
		d := cpu("scaled")
		d.Resources = ray.Resources{ray.CPU: 0.5}
		d.MinReplicas, d.MaxReplicas, d.MaxConcurrentRequests = 1, 2, 2
		d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 1, Interval: 20 * time.Millisecond, DownscaleDelay: time.Hour}
		is.NoErr(srv.Deploy(context.Background(), d))
		g := newGate("scaled")
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				code, _, b := post(t, client, base+"/scaled", EchoIn{Text: "z", Gate: g})
				if code != 200 {
					t.Errorf("%d %s", code, b)
				}
			})
		}
		gates.arrivals(t, g, 2)
		waitStatus(t, srv, "a second replica", func(st serve.Status) bool { return dep(st, "scaled").Ready == 2 })
		gates.release(g)
		wg.Wait()
	})
	t.Run("a process replica", func(t *testing.T) {
		is := is.New(t)
		exe, err := os.Executable()
		is.NoErr(err)
		is.NoErr(srv.Deploy(context.Background(), serve.Deployment{
			Name: "proc",
			Replica: serve.Process(serve.ProcessSpec{
				Command: []string{exe, "-test.run=^$"}, StopTimeout: 5 * time.Second,
				Env: map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": t.TempDir()},
			}),
			Resources: ray.Resources{ray.CPU: 0.5},
		}))
		code, _, b := post(t, client, base+"/proc/echo", map[string]string{"a": "b"})
		is.Equal(code, 200)
		is.True(strings.Contains(string(b), `"worker":""`)) // no TPU env
	})
	t.Run("resources no node has", func(t *testing.T) {
		is := is.New(t)
		d := cpu("huge")
		d.Resources = ray.Resources{ray.CPU: 64}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := srv.Deploy(ctx, d)
		t.Log(err)
		is.Equal(ray.CodeOf(err), ray.Infeasible)
		is.True(ctx.Err() == nil) // at once
		_, found := srv.Status().Deployment("huge")
		is.True(!found)
	})
	t.Run("resources and a slice", func(t *testing.T) {
		is := is.New(t)
		d := cpu("both")
		d.Accelerator = "v6e"
		err := srv.Deploy(context.Background(), d)
		var fe *serve.FieldError
		is.True(errors.As(err, &fe))
		is.Equal(fe.Field, "Accelerator")
		d = cpu("tpures")
		d.Resources = ray.Resources{ray.TPU: 1}
		err = srv.Deploy(context.Background(), d)
		is.True(errors.As(err, &fe))
		is.Equal(fe.Field, "Resources")
	})
}
