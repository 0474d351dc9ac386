//go:build e2e

package kubernetes

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/serve"
)

// TestE2EServeSpotReplicaReplaced: from zero TPU nodes, a serve.Process
// deployment of one v6e 2x4 replica on Spot capacity the driver
// provisions; the replica's Spot pool is preempted (its nodes deleted):
// serve notices the lost replica, starts a replacement, which provisions
// new Spot capacity, and requests are served from the new slice.
func TestE2EServeSpotReplicaReplaced(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	// Replicas in pods of their own network, on capacity pods turned
	// worker pods, reached from the driver's router.
	cp, as := startAutoscaledHarnessIn(t, kubeharness.NetworkIsolated, kubeharness.AutoscalerOptions{})
	_, c := provisioningCluster(t, driverConfig(t, cp), "driver-a", ProvisionConfig{Mode: ProvisionPods, Spot: true}, func(cfg *Config) {
		cfg.DriverHost = cp.HostIP()
	})
	srv, base := serveProcess(t, c, func(d *serve.Deployment) {
		d.MinReplicas, d.MaxReplicas, d.Idempotent = 1, 1, true
		// A check's timeout is generous: at load 16+ with -race, a check's
		// round trip to the pod took over 200 ms twice in a row, which lost
		// healthy replicas; a lost pod is noticed as its host's loss anyway.
		d.Health = &serve.HealthCheck{Period: 200 * time.Millisecond, Timeout: 10 * time.Second, FailureThreshold: 2}
	})
	get := func() (int, string) {
		resp, err := http.Post(base+"/proc/slow", "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, first := get()
	is.Equal(code, http.StatusOK)
	st, _ := srv.Status().Deployment("proc")
	is.Equal(len(st.Replicas), 1)
	pool := st.Replicas[0].Slices[0]
	is.Equal(first, pool) // served from the replica's slice
	node, err := cp.Client().CoreV1().Nodes().Get(ctx, st.Replicas[0].Hosts[0], metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(node.Labels["cloud.google.com/gke-spot"], "true")

	t0 := time.Now()
	is.NoErr(as.Preempt(ctx, pool))
	is.NoErr(srv.WaitStatus(ctx, func(s serve.Status) bool {
		d, _ := s.Deployment("proc")
		return d.ReplicaFailures >= 1 && d.Ready == 1 && len(d.Replicas) == 1 && d.Replicas[0].Slices[0] != pool
	}))
	t.Logf("replica replaced on new Spot capacity %v after the preemption", time.Since(t0))
	st, _ = srv.Status().Deployment("proc")
	code, body := get()
	is.Equal(code, http.StatusOK)
	is.Equal(body, st.Replicas[0].Slices[0]) // served from the new slice
	node, err = cp.Client().CoreV1().Nodes().Get(ctx, st.Replicas[0].Hosts[0], metav1.GetOptions{})
	is.NoErr(err)
	is.Equal(node.Labels["cloud.google.com/gke-spot"], "true")
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
